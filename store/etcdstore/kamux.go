package etcdstore

import (
	"context"
	"errors"
	"fmt"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// kaStream is the Store's one LeaseKeepAlive stream, on which every one-off
// keep-alive of the Store (a reused lease's, a queue entry's, a renewal's)
// is a message each way, where clientv3's KeepAliveOnce opens a stream per
// call. etcd answers a stream's requests in order; answers are matched to
// callers by lease ID, first come first served. It is opened on a
// goroutine of its own, under the Store's context: opening waits for a
// connection (gRPC's reconnect may take 20 s against a member that accepts
// and never answers), and no caller's call may wait past its own context
// for it, nor hold up the others. Its fields but ready are guarded by
// Store.kaMu.
type kaStream struct {
	ready   chan struct{} // closed once the stream is open, or could not be
	stream  pb.Lease_LeaseKeepAliveClient
	cancel  context.CancelFunc
	pending map[int64][]chan kaReply // by lease ID, in the order sent
	broken  bool
	err     error // why it could not be opened
}

// kaReply is etcd's answer to one keep-alive: the lease's TTL, or why none.
type kaReply struct {
	ttl int64
	err error
}

// errStreamBroken is the answer to a keep-alive whose stream broke first.
var errStreamBroken = errors.New("keep-alive stream broken")

// keepAliveTTL keeps id alive once and returns its TTL in seconds;
// rpctypes.ErrLeaseNotFound when the lease is gone. Without a stream (it
// cannot be opened, or the Store is closed), or when the stream breaks
// before the answer, it keeps the lease alive with clientv3's KeepAliveOnce,
// which rides out a short outage within ctx; a keep-alive is idempotent,
// so sending it again does no harm.
func (s *Store) keepAliveTTL(ctx context.Context, id clientv3.LeaseID) (int64, error) {
	if ch, err := s.sendKeepAlive(ctx, id); err == nil {
		select {
		case r := <-ch:
			switch {
			case r.err != nil:
				// The stream broke first: below.
			case r.ttl <= 0:
				return 0, rpctypes.ErrLeaseNotFound
			default:
				return r.ttl, nil
			}
		case <-ctx.Done():
			return 0, context.Cause(ctx)
		}
	} else if ctx.Err() != nil {
		return 0, context.Cause(ctx) // the stream is still opening
	}
	ka, err := s.client.KeepAliveOnce(rpc(ctx), id)
	if err != nil {
		return 0, err
	}
	return ka.TTL, nil
}

// sendKeepAlive sends a keep-alive of id on the Store's stream, having the
// stream opened first when there is none, and returns where its answer
// comes. It waits for a stream being opened at most until ctx ends.
func (s *Store) sendKeepAlive(ctx context.Context, id clientv3.LeaseID) (<-chan kaReply, error) {
	s.kaMu.Lock()
	st := s.ka
	if st == nil {
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			s.kaMu.Unlock()
			return nil, errClosed
		}
		s.wg.Add(1)
		s.mu.Unlock()
		st = &kaStream{ready: make(chan struct{}), pending: make(map[int64][]chan kaReply)}
		s.ka = st
		go s.openKeepAlives(st)
	}
	s.kaMu.Unlock()
	select {
	case <-st.ready:
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
	s.kaMu.Lock()
	defer s.kaMu.Unlock()
	if st.broken {
		if st.err != nil {
			return nil, st.err
		}
		return nil, errStreamBroken
	}
	ch := make(chan kaReply, 1)
	if err := st.stream.Send(&pb.LeaseKeepAliveRequest{ID: int64(id)}); err != nil {
		s.breakStream(st)
		return nil, fmt.Errorf("%w: %w", errStreamBroken, err)
	}
	st.pending[int64(id)] = append(st.pending[int64(id)], ch)
	return ch, nil
}

// openKeepAlives opens st's stream under the Store's context, then reads
// its answers until it breaks (readKeepAlives).
func (s *Store) openKeepAlives(st *kaStream) {
	// WithRequireLeader: a member cut off from its cluster ends the
	// stream instead of keeping it silently.
	sctx, cancel := context.WithCancel(clientv3.WithRequireLeader(s.ctx))
	stream, err := pb.NewLeaseClient(s.client.ActiveConnection()).LeaseKeepAlive(sctx)
	s.kaMu.Lock()
	st.stream, st.cancel = stream, cancel
	if err != nil {
		st.err = fmt.Errorf("open a keep-alive stream: %w", err)
		s.breakStream(st)
	}
	s.kaMu.Unlock()
	close(st.ready)
	if err != nil {
		s.wg.Done()
		return
	}
	s.readKeepAlives(st)
}

// readKeepAlives hands the stream's answers to their callers until it
// breaks (or the Store is closed), then fails the callers still waiting.
func (s *Store) readKeepAlives(st *kaStream) {
	defer s.wg.Done()
	for {
		resp, err := st.stream.Recv()
		s.kaMu.Lock()
		if err != nil {
			s.breakStream(st)
			s.kaMu.Unlock()
			return
		}
		var ch chan kaReply
		if q := st.pending[resp.ID]; len(q) > 0 {
			ch = q[0]
			if len(q) == 1 {
				delete(st.pending, resp.ID)
			} else {
				st.pending[resp.ID] = q[1:]
			}
		}
		s.kaMu.Unlock()
		if ch != nil {
			ch <- kaReply{ttl: resp.TTL} // buffered: a caller that gave up does not block it
		}
	}
}

// breakStream retires st: the next keep-alive makes a new stream, and the
// callers waiting on st are told it broke. s.kaMu is held.
func (s *Store) breakStream(st *kaStream) {
	if st.broken {
		return
	}
	st.broken = true
	st.cancel()
	if s.ka == st {
		s.ka = nil
	}
	for _, q := range st.pending {
		for _, ch := range q {
			ch <- kaReply{err: errStreamBroken}
		}
	}
	st.pending = nil
}
