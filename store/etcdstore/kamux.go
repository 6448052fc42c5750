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
// callers by lease ID, first come first served. Its fields are guarded by
// Store.kaMu.
type kaStream struct {
	stream  pb.Lease_LeaseKeepAliveClient
	cancel  context.CancelFunc
	pending map[int64][]chan kaReply // by lease ID, in the order sent
	broken  bool
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
	if ch, err := s.sendKeepAlive(id); err == nil {
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
	}
	ka, err := s.client.KeepAliveOnce(ctx, id)
	if err != nil {
		return 0, err
	}
	return ka.TTL, nil
}

// sendKeepAlive sends a keep-alive of id on the Store's stream, making the
// stream first when there is none, and returns where its answer comes.
func (s *Store) sendKeepAlive(id clientv3.LeaseID) (<-chan kaReply, error) {
	s.kaMu.Lock()
	defer s.kaMu.Unlock()
	st := s.ka
	if st == nil {
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return nil, errClosed
		}
		s.wg.Add(1)
		s.mu.Unlock()
		// WithRequireLeader: a member cut off from its cluster ends the
		// stream instead of keeping it silently.
		sctx, cancel := context.WithCancel(clientv3.WithRequireLeader(s.ctx))
		stream, err := pb.NewLeaseClient(s.client.ActiveConnection()).LeaseKeepAlive(sctx)
		if err != nil {
			cancel()
			s.wg.Done()
			return nil, fmt.Errorf("open a keep-alive stream: %w", err)
		}
		st = &kaStream{stream: stream, cancel: cancel, pending: make(map[int64][]chan kaReply)}
		s.ka = st
		go s.readKeepAlives(st)
	}
	ch := make(chan kaReply, 1)
	if err := st.stream.Send(&pb.LeaseKeepAliveRequest{ID: int64(id)}); err != nil {
		s.breakStream(st)
		return nil, fmt.Errorf("%w: %w", errStreamBroken, err)
	}
	st.pending[int64(id)] = append(st.pending[int64(id)], ch)
	return ch, nil
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
