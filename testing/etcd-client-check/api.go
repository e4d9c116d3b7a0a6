package main

// The -api mode: every call an application makes through clientv3's KV,
// Watch, Cluster, Maintenance and Lease interfaces, and the concurrency
// package's mutexes and elections (leases.go), each checked against what
// etcd answers. It stops at the first difference.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// check returns an error naming what differs unless ok.
func check(ok bool, format string, args ...any) error {
	if ok {
		return nil
	}
	return fmt.Errorf(format, args...)
}

func keysOf(kvs []*mvccpb.KeyValue) []string {
	out := make([]string, len(kvs))
	for i, kv := range kvs {
		out[i] = string(kv.Key)
	}
	return out
}

func sameKeys(kvs []*mvccpb.KeyValue, want ...string) bool {
	got := keysOf(kvs)
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if got[i] != want[i] {
			return false
		}
	}
	return true
}

func runAPI(endpoints []string) error {
	cli, err := client(endpoints)
	if err != nil {
		return err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	steps := []struct {
		name string
		run  func(context.Context, *clientv3.Client) error
	}{
		{"kv", apiKV},
		{"txn", apiTxn},
		{"watch", apiWatch},
		{"cluster", apiCluster},
		{"maintenance", apiMaintenance},
		{"lease", apiLease},
		{"concurrency", apiConcurrency},
	}
	for _, s := range steps {
		if err := s.run(ctx, cli); err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
		fmt.Printf("checked %s\n", s.name)
	}
	return nil
}

func apiKV(ctx context.Context, cli *clientv3.Client) error {
	first, err := cli.Put(ctx, "api/a", "1")
	if err != nil {
		return err
	}
	for _, kv := range [][2]string{{"api/b", "22"}, {"api/c", "3"}, {"api/d", "444"}} {
		if _, err := cli.Put(ctx, kv[0], kv[1]); err != nil {
			return err
		}
	}
	prev, err := cli.Put(ctx, "api/a", "11", clientv3.WithPrevKV())
	if err != nil {
		return err
	}
	if err := check(prev.PrevKv != nil && string(prev.PrevKv.Value) == "1", "put's prev kv: %v", prev.PrevKv); err != nil {
		return err
	}
	all, err := cli.Get(ctx, "api/", clientv3.WithPrefix())
	if err != nil {
		return err
	}
	if err := check(sameKeys(all.Kvs, "api/a", "api/b", "api/c", "api/d") && all.Count == 4 && !all.More, "prefix get: %v", keysOf(all.Kvs)); err != nil {
		return err
	}
	a := all.Kvs[0]
	if err := check(a.Version == 2 && a.CreateRevision == first.Header.Revision && a.ModRevision == prev.Header.Revision,
		"api/a's version %d, create %d, mod %d", a.Version, a.CreateRevision, a.ModRevision); err != nil {
		return err
	}
	limited, err := cli.Get(ctx, "api/", clientv3.WithPrefix(), clientv3.WithLimit(2))
	if err != nil {
		return err
	}
	if err := check(sameKeys(limited.Kvs, "api/a", "api/b") && limited.More && limited.Count == 4, "limit 2: %v more %v", keysOf(limited.Kvs), limited.More); err != nil {
		return err
	}
	sorted, err := cli.Get(ctx, "api/", clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByValue, clientv3.SortDescend))
	if err != nil {
		return err
	}
	if err := check(sameKeys(sorted.Kvs, "api/d", "api/c", "api/b", "api/a"), "sorted by value, descending: %v", keysOf(sorted.Kvs)); err != nil {
		return err
	}
	old, err := cli.Get(ctx, "api/a", clientv3.WithRev(first.Header.Revision))
	if err != nil {
		return err
	}
	if err := check(len(old.Kvs) == 1 && string(old.Kvs[0].Value) == "1", "api/a at revision %d: %v", first.Header.Revision, old.Kvs); err != nil {
		return err
	}
	keys, err := cli.Get(ctx, "api/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return err
	}
	if err := check(len(keys.Kvs) == 4 && len(keys.Kvs[0].Value) == 0, "keys only: %v", keys.Kvs); err != nil {
		return err
	}
	count, err := cli.Get(ctx, "api/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return err
	}
	if err := check(count.Count == 4 && len(count.Kvs) == 0, "count only: %d %v", count.Count, count.Kvs); err != nil {
		return err
	}
	from, err := cli.Get(ctx, "api/c", clientv3.WithFromKey())
	if err != nil {
		return err
	}
	if err := check(len(from.Kvs) >= 2 && sameKeys(from.Kvs[:2], "api/c", "api/d"), "from key api/c: %v", keysOf(from.Kvs)); err != nil {
		return err
	}
	newer, err := cli.Get(ctx, "api/", clientv3.WithPrefix(), clientv3.WithMinModRev(prev.Header.Revision))
	if err != nil {
		return err
	}
	if err := check(sameKeys(newer.Kvs, "api/a"), "min mod revision %d: %v", prev.Header.Revision, keysOf(newer.Kvs)); err != nil {
		return err
	}
	_, err = cli.Get(ctx, "api/a", clientv3.WithRev(prev.Header.Revision+1000))
	if err := check(errors.Is(err, rpctypes.ErrFutureRev), "a future revision: %v", err); err != nil {
		return err
	}
	del, err := cli.Delete(ctx, "api/c", clientv3.WithPrefix(), clientv3.WithPrevKV())
	if err != nil {
		return err
	}
	if err := check(del.Deleted == 1 && len(del.PrevKvs) == 1 && string(del.PrevKvs[0].Value) == "3", "delete with prev kv: %d %v", del.Deleted, del.PrevKvs); err != nil {
		return err
	}
	_, err = cli.Put(ctx, "", "x")
	return check(errors.Is(err, rpctypes.ErrEmptyKey), "an empty key: %v", err)
}

func apiTxn(ctx context.Context, cli *clientv3.Client) error {
	a, err := cli.Get(ctx, "api/a")
	if err != nil {
		return err
	}
	rev := a.Kvs[0].ModRevision
	resp, err := cli.Txn(ctx).
		If(clientv3.Compare(clientv3.Value("api/a"), "=", "11"),
			clientv3.Compare(clientv3.Version("api/a"), "=", 2),
			clientv3.Compare(clientv3.ModRevision("api/a"), "=", rev),
			clientv3.Compare(clientv3.CreateRevision("api/none"), "=", 0)).
		Then(clientv3.OpPut("api/t", "then"), clientv3.OpGet("api/b"),
			clientv3.OpTxn([]clientv3.Cmp{clientv3.Compare(clientv3.Value("api/b"), ">", "2")},
				[]clientv3.Op{clientv3.OpPut("api/nested", "yes")}, nil)).
		Else(clientv3.OpPut("api/t", "else")).
		Commit()
	if err != nil {
		return err
	}
	if err := check(resp.Succeeded && len(resp.Responses) == 3, "txn: succeeded %v, %d responses", resp.Succeeded, len(resp.Responses)); err != nil {
		return err
	}
	got := resp.Responses[1].GetResponseRange()
	if err := check(got != nil && len(got.Kvs) == 1 && string(got.Kvs[0].Value) == "22", "the txn's get: %v", got); err != nil {
		return err
	}
	nested, err := cli.Get(ctx, "api/nested")
	if err != nil {
		return err
	}
	if err := check(len(nested.Kvs) == 1, "the nested txn's put is missing"); err != nil {
		return err
	}
	failed, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.Value("api/a"), "=", "nope")).Else(clientv3.OpGet("api/a")).Commit()
	if err != nil {
		return err
	}
	if err := check(!failed.Succeeded && len(failed.Responses) == 1, "a failing txn ran %v", failed.Succeeded); err != nil {
		return err
	}
	_, err = cli.Txn(ctx).Then(clientv3.OpPut("api/x", "1"), clientv3.OpPut("api/x", "2")).Commit()
	return check(errors.Is(err, rpctypes.ErrDuplicateKey), "a txn putting one key twice: %v", err)
}

func apiWatch(ctx context.Context, cli *clientv3.Client) error {
	start, err := cli.Put(ctx, "w/1", "a")
	if err != nil {
		return err
	}
	if _, err := cli.Put(ctx, "w/1", "b"); err != nil {
		return err
	}
	if _, err := cli.Delete(ctx, "w/1"); err != nil {
		return err
	}
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	all := cli.Watch(wctx, "w/", clientv3.WithPrefix(), clientv3.WithRev(start.Header.Revision), clientv3.WithPrevKV())
	puts := cli.Watch(wctx, "w/", clientv3.WithPrefix(), clientv3.WithRev(start.Header.Revision), clientv3.WithFilterDelete())
	var events []*clientv3.Event
	for len(events) < 3 {
		wr := <-all
		if err := wr.Err(); err != nil {
			return err
		}
		events = append(events, wr.Events...)
	}
	if err := check(events[0].IsCreate() && events[1].IsModify() && events[2].Type == mvccpb.DELETE &&
		events[1].PrevKv != nil && string(events[1].PrevKv.Value) == "a" && events[2].PrevKv != nil,
		"replayed events with prev kv: %v", events); err != nil {
		return err
	}
	var putEvents []*clientv3.Event
	for len(putEvents) < 2 {
		wr := <-puts
		if err := wr.Err(); err != nil {
			return err
		}
		putEvents = append(putEvents, wr.Events...)
	}
	if err := check(len(putEvents) == 2 && putEvents[0].Type == mvccpb.PUT && putEvents[1].Type == mvccpb.PUT, "no-delete filter: %v", putEvents); err != nil {
		return err
	}
	// A progress request on the quiet stream: a response with no events at
	// the current revision.
	current, err := cli.Get(ctx, "w/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return err
	}
	if err := cli.RequestProgress(wctx); err != nil {
		return err
	}
	for {
		wr := <-all
		if err := wr.Err(); err != nil {
			return err
		}
		if wr.IsProgressNotify() {
			if err := check(wr.Header.Revision >= current.Header.Revision, "progress at %d, below %d", wr.Header.Revision, current.Header.Revision); err != nil {
				return err
			}
			break
		}
	}
	// A live event after the replay, then a cancel closes the channel.
	if _, err := cli.Put(ctx, "w/2", "live"); err != nil {
		return err
	}
	wr := <-all
	if err := check(len(wr.Events) == 1 && string(wr.Events[0].Kv.Key) == "w/2", "the live event: %v", wr.Events); err != nil {
		return err
	}
	wcancel()
	for range all {
	}
	return nil
}

func apiCluster(ctx context.Context, cli *clientv3.Client) error {
	list, err := cli.MemberList(ctx)
	if err != nil {
		return err
	}
	before := len(list.Members)
	if err := check(before >= 3, "%d members", before); err != nil {
		return err
	}
	for _, m := range list.Members {
		if err := check(m.ID != 0 && len(m.PeerURLs) == 1 && len(m.ClientURLs) == 1 && !m.IsLearner, "member %v", m); err != nil {
			return err
		}
	}
	// A learner that never starts: added, updated, refused promotion (it
	// is not in sync), removed.
	added, err := cli.MemberAddAsLearner(ctx, []string{"http://127.0.0.1:1"})
	if err != nil {
		return err
	}
	id := added.Member.ID
	if err := check(added.Member.IsLearner && len(added.Members) == before+1, "the added learner: %v", added.Member); err != nil {
		return err
	}
	if _, err := cli.MemberUpdate(ctx, id, []string{"http://127.0.0.1:2"}); err != nil {
		return err
	}
	list, err = cli.MemberList(ctx)
	if err != nil {
		return err
	}
	updated := false
	for _, m := range list.Members {
		updated = updated || (m.ID == id && m.IsLearner && len(m.PeerURLs) == 1 && m.PeerURLs[0] == "http://127.0.0.1:2")
	}
	if err := check(updated, "the learner's new peer URL is not listed: %v", list.Members); err != nil {
		return err
	}
	_, err = cli.MemberPromote(ctx, id)
	if err := check(errors.Is(err, rpctypes.ErrMemberLearnerNotReady), "promoting a learner that is not in sync: %v", err); err != nil {
		return err
	}
	if _, err := cli.MemberRemove(ctx, id); err != nil {
		return err
	}
	list, err = cli.MemberList(ctx)
	if err != nil {
		return err
	}
	return check(len(list.Members) == before, "%d members after the removal, not %d", len(list.Members), before)
}

func apiMaintenance(ctx context.Context, cli *clientv3.Client) error {
	list, err := cli.MemberList(ctx)
	if err != nil {
		return err
	}
	var leader uint64
	statuses := map[uint64]*clientv3.StatusResponse{}
	for _, m := range list.Members {
		s, err := cli.Status(ctx, m.ClientURLs[0])
		if err != nil {
			return err
		}
		statuses[m.ID] = s
		leader = s.Leader
		if err := check(s.Header.MemberId == m.ID && s.Version != "" && s.DbSize > 0 && s.RaftIndex > 0 && s.RaftTerm > 0 &&
			s.RaftAppliedIndex > 0 && len(s.Errors) == 0, "status of %x: %v", m.ID, s); err != nil {
			return err
		}
	}
	alarms, err := cli.AlarmList(ctx)
	if err != nil {
		return err
	}
	if err := check(len(alarms.Alarms) == 0, "alarms: %v", alarms.Alarms); err != nil {
		return err
	}
	// Members that applied the same revision hash it alike.
	head, err := cli.Get(ctx, "api/a")
	if err != nil {
		return err
	}
	var hashes []uint32
	for _, m := range list.Members {
		h, err := retryHashKV(ctx, cli, m.ClientURLs[0], head.Header.Revision)
		if err != nil {
			return err
		}
		hashes = append(hashes, h)
	}
	for _, h := range hashes[1:] {
		if err := check(h == hashes[0], "hashes at revision %d differ: %v", head.Header.Revision, hashes); err != nil {
			return err
		}
	}
	if _, err := cli.Defragment(ctx, list.Members[0].ClientURLs[0]); err != nil {
		return err
	}
	snapshot, err := cli.Snapshot(ctx)
	if err != nil {
		return err
	}
	size, err := io.Copy(io.Discard, snapshot)
	snapshot.Close()
	if err != nil {
		return err
	}
	if err := check(size > 0, "an empty snapshot"); err != nil {
		return err
	}
	// Move the leadership to another voter, through the leader.
	var target uint64
	var leaderURL string
	for _, m := range list.Members {
		if m.ID == leader {
			leaderURL = m.ClientURLs[0]
		} else if target == 0 && !m.IsLearner {
			target = m.ID
		}
	}
	leaderCli, err := client([]string{leaderURL})
	if err != nil {
		return err
	}
	defer leaderCli.Close()
	if _, err := leaderCli.MoveLeader(ctx, target); err != nil {
		return err
	}
	return retry("waiting for the new leader", func(ctx context.Context) error {
		s, err := cli.Status(ctx, leaderURL)
		if err != nil {
			return err
		}
		return check(s.Leader == target, "the leader is %x, not %x", s.Leader, target)
	})
}

// retryHashKV asks one member for its HashKV at revision until it has
// applied it.
func retryHashKV(ctx context.Context, cli *clientv3.Client, endpoint string, revision int64) (uint32, error) {
	var hash uint32
	err := retry("hashkv of "+endpoint, func(ctx context.Context) error {
		h, err := cli.HashKV(ctx, endpoint, revision)
		if err != nil {
			return err
		}
		if h.Header.Revision < revision {
			return fmt.Errorf("at revision %d", h.Header.Revision)
		}
		hash = h.Hash
		return nil
	})
	return hash, err
}
