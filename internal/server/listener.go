package server

import (
	"container/list"
	"errors"
	"net"
	"sync"
	"sync/atomic"
)

// LimitListener bounds the connections open on lis to max, without letting
// connections that say nothing keep the others out.
//
// A connection counts as in its handshake until it has sent established
// bytes (a gRPC client's HTTP/2 preface, 24 bytes; 1 for a listener whose
// connections are read below TLS, where any byte is the client's hello).
// When a new connection arrives with every place taken, the oldest
// connection still in its handshake is closed to make room: idle
// connections that never send a byte are the cheapest way to fill a
// listener, and a client that connects does so to speak at once. Only when
// every place is held by an established connection does the new one wait
// (Accept blocks) until one closes. Connections in their handshake are
// closed by the server's handshake timeout anyway; this keeps them from
// holding the places even for that long.
func LimitListener(lis net.Listener, max, established int) net.Listener {
	l := &limitListener{Listener: lis, max: max, established: established, handshaking: list.New()}
	l.freed = sync.NewCond(&l.mu)
	return l
}

type limitListener struct {
	net.Listener
	max, established int

	mu          sync.Mutex
	freed       *sync.Cond // a place was freed, or the listener closed
	open        int        // connections holding a place
	handshaking *list.List // of *limitedConn, oldest first
	closed      bool
}

func (l *limitListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	for l.open >= l.max && !l.closed {
		if oldest := l.handshaking.Front(); oldest != nil {
			evicted := oldest.Value.(*limitedConn)
			l.releaseLocked(evicted)
			// Closed outside the lock: Close takes it to release the
			// place, which is released already.
			defer func() { _ = evicted.Conn.Close() }()
			continue
		}
		l.freed.Wait()
	}
	if l.closed {
		l.mu.Unlock()
		_ = c.Close()
		return nil, net.ErrClosed
	}
	lc := &limitedConn{Conn: c, l: l, toRead: l.established}
	l.open++
	if lc.toRead > 0 {
		lc.inHandshake = l.handshaking.PushBack(lc)
	}
	l.mu.Unlock()
	return lc, nil
}

func (l *limitListener) Close() error {
	l.mu.Lock()
	l.closed = true
	l.freed.Broadcast()
	l.mu.Unlock()
	return l.Listener.Close()
}

// releaseLocked frees c's place, once.
func (l *limitListener) releaseLocked(c *limitedConn) {
	if c.released {
		return
	}
	c.released = true
	if c.inHandshake != nil {
		l.handshaking.Remove(c.inHandshake)
		c.inHandshake = nil
	}
	l.open--
	l.freed.Signal()
}

// limitedConn is a connection holding a place of its listener until closed.
type limitedConn struct {
	net.Conn
	l *limitListener

	// established is set once it has sent its first bytes: its reads then
	// take no lock.
	established atomic.Bool

	// Guarded by l.mu:
	toRead      int           // bytes still to read before it is established
	inHandshake *list.Element // nil once established (or released)
	released    bool
}

func (c *limitedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 && !c.established.Load() {
		c.l.mu.Lock()
		if c.toRead > 0 {
			c.toRead -= n
			if c.toRead <= 0 && c.inHandshake != nil {
				c.l.handshaking.Remove(c.inHandshake)
				c.inHandshake = nil
			}
		}
		if c.toRead <= 0 {
			c.established.Store(true)
		}
		c.l.mu.Unlock()
	}
	return n, err
}

func (c *limitedConn) Close() error {
	c.l.mu.Lock()
	c.l.releaseLocked(c)
	c.l.mu.Unlock()
	err := c.Conn.Close()
	if errors.Is(err, net.ErrClosed) {
		return nil // evicted, and closed then
	}
	return err
}
