package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
)

// The formats of the operational logs (--log-format): not the
// ocl_capacity lines, which are always JSON.
const (
	LogFormatText = "text"
	LogFormatJSON = "json"
)

// newLogger returns the operational logger writing format to w.
func newLogger(format string, w io.Writer) (*slog.Logger, error) {
	switch strings.ToLower(strings.TrimSpace(format)) {
	case LogFormatText, "":
		return slog.New(slog.NewTextHandler(w, nil)), nil
	case LogFormatJSON:
		return slog.New(slog.NewJSONHandler(w, nil)), nil
	}
	return nil, fmt.Errorf("--log-format %q: use text or json", format)
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
