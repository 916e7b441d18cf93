package server

import (
	"io"
	"log/slog"

	"airlock/internal/config"
)

// NewLogger is the server's log as log configures it: text (key=value)
// or JSON lines on w, at log.level (debug logs every request; serve -v
// sets it).
func NewLogger(log config.Log, w io.Writer) *slog.Logger {
	var level slog.Level
	switch log.Level {
	case "debug":
		level = slog.LevelDebug
	case "warn":
		level = slog.LevelWarn
	case "error":
		level = slog.LevelError
	default:
		level = slog.LevelInfo
	}
	opts := &slog.HandlerOptions{Level: level}
	if log.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
