// Command etcd-client-check drives a cluster through etcd's own Go client
// (clientv3, pinned in go.mod) the way applications use it, and checks what
// etcd promises them:
//
//   - STM transfers between accounts (concurrency.NewSTM, serializable
//     snapshot isolation: reads at one revision, a Txn that commits only if
//     nothing read changed) from concurrent workers conserve the total;
//   - a watcher on the accounts, connected to one member only, sees every
//     revision from its start on exactly once, in order, without a gap,
//     resuming by itself when its member or the leader goes away;
//   - once the history is compacted, a watch from below the compacted
//     revision ends with a response naming it and etcd's ErrCompacted.
//
// It prints "ready" once the accounts exist (the caller may then kill and
// restart members), runs for -duration, then prints a summary line
// starting with "ok" or "FAIL" and exits 0 or 1.
//
// With -api it instead checks every KV, Watch, Cluster and Maintenance
// call an application makes, against what etcd answers (api.go).
//
// With -history FILE it instead records a history for a linearizability
// checker: concurrent clients get, put, delete and compare-and-swap (a Txn
// on the value, or on create revision 0 for an absent key) a few keys, and
// every operation goes to FILE as one tab-separated line (see history.go).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"
)

const prefix = "acct/"

func main() {
	endpoints := flag.String("endpoints", "127.0.0.1:7379", "comma-separated client endpoints")
	watchAt := flag.String("watch-endpoint", "", "the one endpoint the watcher uses (default: the first)")
	accounts := flag.Int("accounts", 10, "number of accounts")
	workers := flag.Int("workers", 4, "concurrent transfer workers")
	duration := flag.Duration("duration", 10*time.Second, "how long the workers transfer")
	history := flag.String("history", "", "record a get/put/delete/CAS history to this file instead")
	api := flag.Bool("api", false, "check every KV, Watch, Cluster and Maintenance call instead (api.go)")
	flag.Parse()
	eps := strings.Split(*endpoints, ",")
	if *watchAt == "" {
		*watchAt = eps[0]
	}
	if *api {
		if err := runAPI(eps); err != nil {
			fmt.Printf("FAIL: %v\n", err)
			os.Exit(1)
		}
		fmt.Println("ok: every call answered as etcd's")
		return
	}
	if *history != "" {
		if err := record(eps, *history, *workers, *duration); err != nil {
			fmt.Printf("FAIL: %v\n", err)
			os.Exit(1)
		}
		return
	}
	if err := run(eps, *watchAt, *accounts, *workers, *duration); err != nil {
		fmt.Printf("FAIL: %v\n", err)
		os.Exit(1)
	}
}

func client(endpoints []string) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
}

func key(i int) string { return fmt.Sprintf("%s%03d", prefix, i) }

type event struct {
	rev int64
	key string
}

func run(endpoints []string, watchAt string, accounts, workers int, duration time.Duration) error {
	cli, err := client(endpoints)
	if err != nil {
		return err
	}
	defer cli.Close()

	// The accounts, 100 each, in one transaction.
	const initial = 100
	var puts []clientv3.Op
	for i := 0; i < accounts; i++ {
		puts = append(puts, clientv3.OpPut(key(i), strconv.Itoa(initial)))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	resp, err := cli.Txn(ctx).Then(puts...).Commit()
	cancel()
	if err != nil {
		return fmt.Errorf("creating the accounts: %w", err)
	}
	start := resp.Header.Revision

	// The watcher, on one member, from the revision after the accounts.
	wcli, err := client([]string{watchAt})
	if err != nil {
		return err
	}
	defer wcli.Close()
	var mu sync.Mutex
	var seen []event
	var watchErr error
	wctx, stopWatch := context.WithCancel(context.Background())
	defer stopWatch()
	watching := make(chan struct{})
	go func() {
		defer close(watching)
		// clientv3 resumes the watch by itself after a lost connection,
		// from the revision after the last one it delivered.
		for wr := range wcli.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(start+1)) {
			mu.Lock()
			if err := wr.Err(); err != nil && wctx.Err() == nil {
				watchErr = err
			}
			for _, ev := range wr.Events {
				seen = append(seen, event{ev.Kv.ModRevision, string(ev.Kv.Key)})
			}
			mu.Unlock()
		}
	}()
	fmt.Println("ready", start)

	// Transfers until the deadline.
	var committed, failed atomic.Int64
	deadline := time.Now().Add(duration)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(seed int64) {
			defer wg.Done()
			rng := rand.New(rand.NewSource(seed))
			for time.Now().Before(deadline) {
				from, to := rng.Intn(accounts), rng.Intn(accounts)
				if from == to {
					continue
				}
				amount := 1 + rng.Intn(5)
				ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
				_, err := concurrency.NewSTM(cli, func(s concurrency.STM) error {
					a, _ := strconv.Atoi(s.Get(key(from)))
					b, _ := strconv.Atoi(s.Get(key(to)))
					if a < amount {
						return nil
					}
					s.Put(key(from), strconv.Itoa(a-amount))
					s.Put(key(to), strconv.Itoa(b+amount))
					return nil
				}, concurrency.WithAbortContext(ctx))
				cancel()
				if err != nil {
					failed.Add(1)
					time.Sleep(50 * time.Millisecond)
				} else {
					committed.Add(1)
				}
			}
		}(int64(w) + 1)
	}
	wg.Wait()

	// The final balances and revision, read linearizably.
	var final *clientv3.GetResponse
	for attempt := 0; ; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		final, err = cli.Get(ctx, prefix, clientv3.WithPrefix())
		cancel()
		if err == nil {
			break
		}
		if attempt == 20 {
			return fmt.Errorf("reading the final balances: %w", err)
		}
		time.Sleep(500 * time.Millisecond)
	}
	total := 0
	for _, kv := range final.Kvs {
		v, _ := strconv.Atoi(string(kv.Value))
		total += v
	}
	if len(final.Kvs) != accounts || total != accounts*initial {
		return fmt.Errorf("the total is %d over %d accounts, not %d", total, len(final.Kvs), accounts*initial)
	}
	end := final.Header.Revision
	if committed.Load() == 0 {
		return fmt.Errorf("no transfer committed (%d failed)", failed.Load())
	}

	// Every revision from start+1 to end, each once, in order.
	waitUntil := time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		last := int64(0)
		if len(seen) > 0 {
			last = seen[len(seen)-1].rev
		}
		done := last >= end
		mu.Unlock()
		if done {
			break
		}
		if time.Now().After(waitUntil) {
			mu.Lock()
			defer mu.Unlock()
			return fmt.Errorf("the watcher reached revision %d, not %d (watch error: %v)", last, end, watchErr)
		}
		time.Sleep(100 * time.Millisecond)
	}
	stopWatch()
	<-watching
	mu.Lock()
	defer mu.Unlock()
	next := start + 1
	keysAt := map[string]bool{}
	for _, ev := range seen {
		switch {
		case ev.rev == next-1 && !keysAt[ev.key]:
			// another key of the same transfer
		case ev.rev == next:
			next++
			keysAt = map[string]bool{}
		default:
			return fmt.Errorf("the watcher got revision %d (%s) after %d: a gap, a repeat or disorder", ev.rev, ev.key, next-1)
		}
		keysAt[ev.key] = true
	}
	if next-1 < end {
		return fmt.Errorf("the watcher stopped at revision %d of %d", next-1, end)
	}
	if err := watchCompacted(cli, wcli, start+1, end); err != nil {
		return err
	}
	fmt.Printf("ok transfers=%d failed=%d revisions=%d..%d events=%d total=%d\n",
		committed.Load(), failed.Load(), start+1, end, len(seen), total)
	return nil
}

// retry runs f with a fresh 5-second context until it succeeds, for a
// cluster whose members were just killed and restarted.
func retry(what string, f func(ctx context.Context) error) error {
	for attempt := 0; ; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := f(ctx)
		cancel()
		if err == nil {
			return nil
		}
		if attempt == 20 {
			return fmt.Errorf("%s: %w", what, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// watchCompacted compacts the history at end and watches from start,
// below it, on the watcher's member: clientv3 must deliver one response
// that names the compacted revision, with ErrCompacted, as from etcd.
func watchCompacted(cli, wcli *clientv3.Client, start, end int64) error {
	err := retry("compacting", func(ctx context.Context) error {
		_, err := cli.Compact(ctx, end)
		if errors.Is(err, rpctypes.ErrCompacted) {
			return nil // an attempt that timed out went through
		}
		return err
	})
	if err != nil {
		return err
	}
	// A linearizable read on the watcher's member: it has applied the
	// compaction before the watch starts.
	err = retry("reading from the watcher's member", func(ctx context.Context) error {
		_, err := wcli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
		return err
	})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	wr, ok := <-wcli.Watch(ctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(start))
	if !ok {
		return fmt.Errorf("the watch from compacted revision %d closed without a response", start)
	}
	if wr.CompactRevision != end || !errors.Is(wr.Err(), rpctypes.ErrCompacted) {
		return fmt.Errorf("the watch from compacted revision %d got compact revision %d and error %v, not %d and %v",
			start, wr.CompactRevision, wr.Err(), end, rpctypes.ErrCompacted)
	}
	return nil
}
