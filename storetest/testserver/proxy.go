package testserver

import (
	"net"
	"sync"
	"testing"
	"time"
)

// Proxy forwards TCP connections from a loopback port to a target and injects
// network faults between them: a reply lost after its request was applied,
// a silent partition that holds every byte without closing anything, or
// latency added to every byte in each direction.
type Proxy struct {
	ln     net.Listener
	target string
	wg     sync.WaitGroup

	mu      sync.Mutex
	conns   map[net.Conn]struct{}
	cuts    int           // server→client reads to swallow, closing the client
	thawed  chan struct{} // nil unless frozen; closed by Thaw
	held    int           // reads waiting for a Thaw
	latency time.Duration // added to each direction: one way, not the round trip
	closed  bool
}

// NewProxy listens on a free 127.0.0.1 port and forwards to target.
func NewProxy(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, conns: make(map[net.Conn]struct{})}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// StartProxy starts a Proxy for a test and closes it at the test's end.
func StartProxy(tb testing.TB, target string) *Proxy {
	tb.Helper()
	p, err := NewProxy(target)
	if err != nil {
		tb.Fatalf("testserver: proxy: %v", err)
	}
	tb.Cleanup(func() { _ = p.Close() })
	return p
}

// Addr returns the proxy's "127.0.0.1:PORT".
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// CutNextReply makes the next bytes the server sends on any connection
// vanish and that client connection close: the request was applied, its
// answer lost, as when a connection breaks at the wrong moment.
func (p *Proxy) CutNextReply() {
	p.mu.Lock()
	p.cuts++
	p.mu.Unlock()
}

// PendingCuts returns how many cuts CutNextReply asked for have not yet
// swallowed a reply: 0 once every cut has closed a connection.
func (p *Proxy) PendingCuts() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cuts
}

// Freeze holds every byte in both directions, keeping connections open: a
// silent partition, which only timeouts notice.
func (p *Proxy) Freeze() {
	p.mu.Lock()
	if p.thawed == nil {
		p.thawed = make(chan struct{})
	}
	p.mu.Unlock()
}

// Held returns how many reads a Freeze holds now, in either direction: at
// least one once a client's request is stuck in the partition.
func (p *Proxy) Held() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.held
}

// Thaw lets held and new bytes through again.
func (p *Proxy) Thaw() {
	p.mu.Lock()
	if p.thawed != nil {
		close(p.thawed)
		p.thawed = nil
	}
	p.mu.Unlock()
}

// Drop closes every connection open now, as a broken link or a restarted
// middlebox does; the proxy goes on accepting new ones. After Freeze, the
// new ones are held silent: a reconnect that hangs in its handshake.
func (p *Proxy) Drop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		_ = c.Close()
	}
}

// SetLatency delays every byte read from now on by d in each direction
// (a round trip by 2d), keeping their order, as a slow link does; 0 ends
// the delay (bytes already held keep theirs). It stands in for tc netem,
// which needs kernel modules.
func (p *Proxy) SetLatency(d time.Duration) {
	p.mu.Lock()
	p.latency = max(d, 0)
	p.mu.Unlock()
}

// Close stops listening, closes every connection and waits for its goroutines.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	for c := range p.conns {
		_ = c.Close()
	}
	if p.thawed != nil {
		close(p.thawed)
		p.thawed = nil
	}
	p.mu.Unlock()
	err := p.ln.Close()
	p.wg.Wait()
	return err
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = client.Close()
			continue
		}
		if !p.track(client, server) {
			return
		}
		p.wg.Add(4)
		go p.pipe(client, server, false)
		go p.pipe(server, client, true)
	}
}

func (p *Proxy) track(conns ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		for _, c := range conns {
			_ = c.Close()
		}
		return false
	}
	for _, c := range conns {
		p.conns[c] = struct{}{}
	}
	return true
}

// chunk is bytes read, and when they may be written on.
type chunk struct {
	b   []byte
	due time.Time
}

// pipeDepth bounds the chunks held per direction (up to 2 MiB): a slow
// reader on the far side holds back the sender, as TCP would.
const pipeDepth = 64

// pipe copies src to dst until either side closes, each read written on
// after the latency in force when it was read. fromServer marks the
// direction whose bytes CutNextReply swallows.
func (p *Proxy) pipe(src, dst net.Conn, fromServer bool) {
	defer p.wg.Done()
	ch := make(chan chunk, pipeDepth)
	go p.deliver(ch, src, dst)
	defer close(ch)
	for {
		buf := make([]byte, 32<<10)
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			thawed, cut, latency := p.thawed, fromServer && p.cuts > 0, p.latency
			if cut {
				p.cuts--
			} else if thawed != nil {
				p.held++ // until the Thaw below
			}
			p.mu.Unlock()
			if cut {
				_ = src.Close() // drops the reply and the connection
				_ = dst.Close()
				return
			}
			if thawed != nil {
				<-thawed
				p.mu.Lock()
				p.held--
				p.mu.Unlock()
			}
			ch <- chunk{buf[:n], time.Now().Add(latency)}
		}
		if err != nil {
			return // EOF or a closed connection
		}
	}
}

// deliver writes the chunks to dst, each at its due time, then closes both
// connections: when the reading side ended, or a write failed.
func (p *Proxy) deliver(ch <-chan chunk, src, dst net.Conn) {
	defer p.wg.Done()
	defer func() { _ = src.Close(); _ = dst.Close() }()
	for c := range ch {
		if wait := time.Until(c.due); wait > 0 {
			time.Sleep(wait) // the delay is the fault: nothing to wait for but the clock
		}
		if _, err := dst.Write(c.b); err != nil {
			_ = src.Close() // ends the reader, which closes ch
			_ = dst.Close()
			for range ch {
			}
			return
		}
	}
}
