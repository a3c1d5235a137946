package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"strings"
)

// The formats of the operational logs (--log-format): not the
// per-call log lines, which are always JSON.
const (
	LogFormatText = "text"
	LogFormatJSON = "json"
)

// newLogger returns the operational logger writing format to w. Every
// value it writes has the passwords of URLs in it masked (maskSecrets).
func newLogger(format string, w io.Writer) (*slog.Logger, error) {
	opts := &slog.HandlerOptions{ReplaceAttr: maskAttr}
	switch strings.ToLower(strings.TrimSpace(format)) {
	case LogFormatText, "":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case LogFormatJSON:
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: use text or json", format)
}

// urlPassword matches the password of a URL written in text:
// scheme://user:password@.
var urlPassword = regexp.MustCompile(`([a-zA-Z][a-zA-Z0-9+.-]*://[^:/@\s]*):[^@\s/]*@`)

// maskSecrets masks the passwords of the URLs in s.
func maskSecrets(s string) string {
	if !strings.Contains(s, "://") {
		return s
	}
	return urlPassword.ReplaceAllString(s, "${1}:xxxxx@")
}

// maskAttr is the loggers' ReplaceAttr: a string, error or Stringer value
// (a URL, an error quoting one) is written with its passwords masked, the
// message too, so no log line carries a secret however it was built.
func maskAttr(_ []string, a slog.Attr) slog.Attr {
	v := a.Value
	switch v.Kind() {
	case slog.KindString:
		if m := maskSecrets(v.String()); m != v.String() {
			a.Value = slog.StringValue(m)
		}
	case slog.KindAny:
		var s string
		switch x := v.Any().(type) {
		case error:
			s = x.Error()
		case fmt.Stringer:
			s = x.String()
		default:
			return a
		}
		if m := maskSecrets(s); m != s {
			a.Value = slog.StringValue(m)
		}
	}
	return a
}

// redisLogger routes go-redis's own log lines (a dial that failed, a
// Sentinel that did not answer) into slog's default logger, so they come
// out in the operational log's format instead of raw on stderr.
type redisLogger struct{}

func (redisLogger) Printf(ctx context.Context, format string, v ...any) {
	slog.Default().WarnContext(ctx, "redis client: "+strings.TrimPrefix(fmt.Sprintf(format, v...), "redis: "),
		slog.String("component", "go-redis"))
}

// processKey marks a context as the process's own (processMain), where a
// command may install its logger as the process-wide default.
type processKey struct{}

func withProcess(ctx context.Context) context.Context {
	return context.WithValue(ctx, processKey{}, true)
}

// setProcessLogger makes l the default logger (which go-redis's lines go
// to) when ctx is the process's own; in tests, which run commands in the
// test process, it does nothing.
func setProcessLogger(ctx context.Context, l *slog.Logger) {
	if ok, _ := ctx.Value(processKey{}).(bool); ok {
		slog.SetDefault(l)
	}
}
