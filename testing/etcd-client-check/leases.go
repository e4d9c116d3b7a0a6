package main

// The -api mode's lease and concurrency steps: clientv3's Lease interface,
// and the concurrency package's sessions, mutexes and elections, which
// applications build on leases, txns and watches.

import (
	"context"
	"errors"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

func apiLease(ctx context.Context, cli *clientv3.Client) error {
	grant, err := cli.Grant(ctx, 5)
	if err != nil {
		return err
	}
	if err := check(grant.ID != 0 && grant.TTL == 5, "grant: id %x ttl %d", grant.ID, grant.TTL); err != nil {
		return err
	}
	if _, err := cli.Put(ctx, "api/lease/k", "v", clientv3.WithLease(grant.ID)); err != nil {
		return err
	}
	ttl, err := cli.TimeToLive(ctx, grant.ID, clientv3.WithAttachedKeys())
	if err != nil {
		return err
	}
	if err := check(ttl.GrantedTTL == 5 && ttl.TTL > 0 && ttl.TTL <= 5 && len(ttl.Keys) == 1 && string(ttl.Keys[0]) == "api/lease/k",
		"time to live: granted %d, left %d, keys %q", ttl.GrantedTTL, ttl.TTL, ttl.Keys); err != nil {
		return err
	}
	alive, err := cli.KeepAliveOnce(ctx, grant.ID)
	if err != nil {
		return err
	}
	if err := check(alive.ID == grant.ID && alive.TTL == 5, "keep-alive: id %x ttl %d", alive.ID, alive.TTL); err != nil {
		return err
	}
	leases, err := cli.Leases(ctx)
	if err != nil {
		return err
	}
	found := false
	for _, l := range leases.Leases {
		found = found || l.ID == grant.ID
	}
	if err := check(found, "leases: %v lacks %x", leases.Leases, grant.ID); err != nil {
		return err
	}
	if _, err := cli.Revoke(ctx, grant.ID); err != nil {
		return err
	}
	get, err := cli.Get(ctx, "api/lease/k")
	if err != nil {
		return err
	}
	if err := check(len(get.Kvs) == 0, "a revoked lease's key is still there"); err != nil {
		return err
	}
	if ttl, err = cli.TimeToLive(ctx, grant.ID); err != nil {
		return err
	}
	if err := check(ttl.TTL == -1, "time to live of a revoked lease: %d", ttl.TTL); err != nil {
		return err
	}
	if _, err := cli.KeepAliveOnce(ctx, grant.ID); !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return check(false, "keep-alive of a revoked lease: %v", err)
	}
	if _, err := cli.Put(ctx, "api/lease/x", "v", clientv3.WithLease(grant.ID)); !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return check(false, "put with a revoked lease: %v", err)
	}
	return nil
}

func apiConcurrency(ctx context.Context, cli *clientv3.Client) error {
	one, err := concurrency.NewSession(cli, concurrency.WithTTL(5))
	if err != nil {
		return err
	}
	defer one.Close()
	two, err := concurrency.NewSession(cli, concurrency.WithTTL(5))
	if err != nil {
		return err
	}
	defer two.Close()

	// A mutex: the second waits while the first holds it.
	first, second := concurrency.NewMutex(one, "api/lock"), concurrency.NewMutex(two, "api/lock")
	if err := first.Lock(ctx); err != nil {
		return err
	}
	short, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	err = second.Lock(short)
	cancel()
	if err := check(errors.Is(err, context.DeadlineExceeded), "a held mutex was taken: %v", err); err != nil {
		return err
	}
	if err := first.Unlock(ctx); err != nil {
		return err
	}
	if err := second.Lock(ctx); err != nil {
		return err
	}
	if err := second.Unlock(ctx); err != nil {
		return err
	}

	// An election: leadership passes on resign.
	a, b := concurrency.NewElection(one, "api/elect"), concurrency.NewElection(two, "api/elect")
	if err := a.Campaign(ctx, "a"); err != nil {
		return err
	}
	leader, err := a.Leader(ctx)
	if err != nil {
		return err
	}
	if err := check(string(leader.Kvs[0].Value) == "a", "leader: %q", leader.Kvs[0].Value); err != nil {
		return err
	}
	won := make(chan error, 1)
	go func() { won <- b.Campaign(ctx, "b") }()
	select {
	case err := <-won:
		return check(false, "b won while a led: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	if err := a.Resign(ctx); err != nil {
		return err
	}
	if err := <-won; err != nil {
		return err
	}
	leader, err = b.Leader(ctx)
	if err != nil {
		return err
	}
	return check(string(leader.Kvs[0].Value) == "b", "leader after resign: %q", leader.Kvs[0].Value)
}
