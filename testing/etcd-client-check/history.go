package main

import (
	"bufio"
	"context"
	"fmt"
	"math/rand"
	"os"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// One line per operation, tab-separated:
//
//	client op key value expected invoke return result
//
// op is get, put, del or cas; value and expected are "-" where they do not
// apply and expected is "~" for "absent"; invoke and return are
// nanoseconds since the start (return -1: unknown outcome); result is the
// value read ("~": absent), "ok", "true"/"false" (swapped or not), or "?".
type op struct {
	client           int
	kind, key, value string
	expected         string
	invoke, ret      int64
	result           string
}

const absent = "~"

func record(endpoints []string, path string, workers int, duration time.Duration) error {
	cli, err := client(endpoints)
	if err != nil {
		return err
	}
	defer cli.Close()
	start := time.Now()
	since := func() int64 { return time.Since(start).Nanoseconds() }
	keys := []string{"lin/a", "lin/b", "lin/c", "lin/d"}

	var mu sync.Mutex
	var ops []op
	deadline := start.Add(duration)
	var wg sync.WaitGroup
	fmt.Println("ready")
	for w := 1; w <= workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			rng := rand.New(rand.NewSource(int64(w)))
			last := map[string]string{} // what this client last saw per key
			for n := 0; time.Now().Before(deadline); n++ {
				k := keys[rng.Intn(len(keys))]
				o := op{client: w, key: k, value: "-", expected: "-"}
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				o.invoke = since()
				var err error
				switch r := rng.Intn(100); {
				case r < 35:
					o.kind = "get"
					var resp *clientv3.GetResponse
					resp, err = cli.Get(ctx, k)
					if err == nil {
						o.result = absent
						if len(resp.Kvs) > 0 {
							o.result = string(resp.Kvs[0].Value)
						}
						last[k] = o.result
					}
				case r < 60:
					o.kind, o.value = "put", fmt.Sprintf("%d-%d", w, n)
					_, err = cli.Put(ctx, k, o.value)
					o.result = "ok"
				case r < 70:
					o.kind = "del"
					_, err = cli.Delete(ctx, k)
					o.result = "ok"
				default:
					o.kind, o.value = "cas", fmt.Sprintf("%d-%d", w, n)
					o.expected = absent
					if v, ok := last[k]; ok {
						o.expected = v
					}
					cmp := clientv3.Compare(clientv3.Value(k), "=", o.expected)
					if o.expected == absent {
						cmp = clientv3.Compare(clientv3.CreateRevision(k), "=", 0)
					}
					var resp *clientv3.TxnResponse
					resp, err = cli.Txn(ctx).If(cmp).Then(clientv3.OpPut(k, o.value)).Commit()
					if err == nil {
						o.result = fmt.Sprint(resp.Succeeded)
						if resp.Succeeded {
							last[k] = o.value
						}
					}
				}
				cancel()
				o.ret = since()
				if err != nil {
					o.ret, o.result = -1, "?"
					time.Sleep(20 * time.Millisecond)
				}
				mu.Lock()
				ops = append(ops, o)
				mu.Unlock()
			}
		}(w)
	}
	wg.Wait()

	f, err := os.Create(path)
	if err != nil {
		return err
	}
	out := bufio.NewWriter(f)
	known := 0
	for _, o := range ops {
		if o.ret >= 0 {
			known++
		}
		fmt.Fprintf(out, "%d\t%s\t%s\t%s\t%s\t%d\t%d\t%s\n", o.client, o.kind, o.key, o.value, o.expected, o.invoke, o.ret, o.result)
	}
	if err := out.Flush(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	fmt.Printf("ok operations=%d returned=%d\n", len(ops), known)
	return nil
}
