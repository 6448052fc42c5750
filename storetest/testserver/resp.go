package testserver

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// This file holds a minimal RESP2 client: just enough to send one command and
// read one reply. It is used to check readiness and to build clusters.

// Sanity limits on reply sizes, so that a garbled stream cannot make us
// allocate huge buffers.
const (
	maxBulkLen  = 64 << 20
	maxArrayLen = 1 << 20
)

// redisError is an error reply ("-ERR ...") from the server.
type redisError string

func (e redisError) Error() string { return string(e) }

// writeCommand writes args as one RESP array of bulk strings.
func writeCommand(w io.Writer, args []string) error {
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// readReply reads one reply. The result is one of:
//
//	string      simple string or bulk string
//	int64       integer
//	nil         nil bulk string or nil array
//	[]any       array (elements are again of these types)
//	redisError  error reply
//
// The returned error is only for I/O and protocol errors.
func readReply(r *bufio.Reader) (any, error) {
	line, err := readLine(r)
	if err != nil {
		return nil, err
	}
	if line == "" {
		return nil, fmt.Errorf("resp: empty reply line")
	}
	kind, rest := line[0], line[1:]
	switch kind {
	case '+':
		return rest, nil
	case '-':
		return redisError(rest), nil
	case ':':
		n, err := strconv.ParseInt(rest, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("resp: bad integer %q", rest)
		}
		return n, nil
	case '$':
		n, err := strconv.Atoi(rest)
		if err != nil || n > maxBulkLen {
			return nil, fmt.Errorf("resp: bad bulk length %q", rest)
		}
		if n < 0 {
			return nil, nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, err
		}
		if buf[n] != '\r' || buf[n+1] != '\n' {
			return nil, fmt.Errorf("resp: bulk string not terminated by CRLF")
		}
		return string(buf[:n]), nil
	case '*':
		n, err := strconv.Atoi(rest)
		if err != nil || n > maxArrayLen {
			return nil, fmt.Errorf("resp: bad array length %q", rest)
		}
		if n < 0 {
			return nil, nil
		}
		items := make([]any, 0, n)
		for i := 0; i < n; i++ {
			item, err := readReply(r)
			if err != nil {
				return nil, err
			}
			items = append(items, item)
		}
		return items, nil
	default:
		return nil, fmt.Errorf("resp: unknown reply type %q", kind)
	}
}

// readLine reads one CRLF-terminated line and returns it without the CRLF.
func readLine(r *bufio.Reader) (string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	if !strings.HasSuffix(line, "\r\n") {
		return "", fmt.Errorf("resp: line not terminated by CRLF: %q", line)
	}
	return line[:len(line)-2], nil
}
