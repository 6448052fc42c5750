package testserver

import (
	"fmt"
	"syscall"
	"testing"
)

// ClosedAddr returns a loopback "127.0.0.1:PORT" on which nothing listens,
// for the tests of a store that is down: connecting is refused at once.
// The port stays bound, without listening, until the test ends, so no
// other test or server can take it meanwhile (a port merely closed after
// net.Listen can be handed to the next server that asks for a free one,
// and a client would then talk to that).
func ClosedAddr(tb testing.TB) string {
	tb.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		tb.Fatalf("testserver: closed address: socket: %v", err)
	}
	syscall.CloseOnExec(fd)
	tb.Cleanup(func() { _ = syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		tb.Fatalf("testserver: closed address: bind: %v", err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		tb.Fatalf("testserver: closed address: getsockname: %v", err)
	}
	in4, ok := sa.(*syscall.SockaddrInet4)
	if !ok {
		tb.Fatalf("testserver: closed address: bound to %T", sa)
	}
	return fmt.Sprintf("127.0.0.1:%d", in4.Port)
}
