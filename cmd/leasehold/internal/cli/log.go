package cli

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"strings"
	"sync"
)

// logger is what the command logs beside its output and its one-line
// error (drill: a worker process that failed): lines on stderr as slog's
// default logger writes them, "2006/01/02 15:04:05 ERROR message
// key=value …", every secret of the command line hidden.
func (a *app) logger() *slog.Logger {
	attrs := new(bytes.Buffer)
	text := slog.NewTextHandler(attrs, &slog.HandlerOptions{ReplaceAttr: func(groups []string, at slog.Attr) slog.Attr {
		if len(groups) == 0 && (at.Key == slog.TimeKey || at.Key == slog.LevelKey || at.Key == slog.MessageKey) {
			return slog.Attr{} // written by lineHandler, as slog's default logger writes them
		}
		return at
	}})
	return slog.New(&lineHandler{mu: new(sync.Mutex), w: a.stderr, attrs: attrs, text: text, hide: a.hideSecrets})
}

// lineHandler writes a record as one line: its time, level and message,
// then its attributes as text writes them into attrs.
type lineHandler struct {
	mu    *sync.Mutex // guards attrs and w, shared by the handlers WithAttrs and WithGroup derive
	w     io.Writer
	attrs *bytes.Buffer
	text  slog.Handler
	hide  func(string) string
}

func (h *lineHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelInfo }

func (h *lineHandler) Handle(ctx context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.attrs.Reset()
	if err := h.text.Handle(ctx, r); err != nil {
		return err
	}
	line := r.Time.Format("2006/01/02 15:04:05") + " " + r.Level.String() + " " + r.Message
	if attrs := strings.TrimSuffix(h.attrs.String(), "\n"); attrs != "" {
		line += " " + attrs
	}
	_, err := io.WriteString(h.w, h.hide(line)+"\n")
	return err
}

func (h *lineHandler) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	c.text = h.text.WithAttrs(as)
	return &c
}

func (h *lineHandler) WithGroup(name string) slog.Handler {
	c := *h
	c.text = h.text.WithGroup(name)
	return &c
}
