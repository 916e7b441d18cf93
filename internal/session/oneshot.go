package session

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"time"

	"airlock/internal/config"
	"airlock/internal/errdefs"
	"airlock/internal/runtimes"
	"airlock/internal/workspace"
)

// InputFile is a file placed in /workspace before a one-shot execution.
// Exactly one of Content (text) and ContentBase64 (bytes) is used.
type InputFile struct {
	Path          string `json:"path"`
	Content       string `json:"content,omitempty"`
	ContentBase64 string `json:"content_base64,omitempty"`
}

// OneShotRequest runs code once in a fresh jail.
type OneShotRequest struct {
	Language string            `json:"language"`
	Code     string            `json:"code"`
	Files    []InputFile       `json:"files"`
	Limits   config.Limits     `json:"limits"`
	Env      map[string]string `json:"env"`
}

// OutputFile is a file a one-shot execution created or modified.
type OutputFile struct {
	Path          string `json:"path"`
	Size          int64  `json:"size"`
	ContentBase64 string `json:"content_base64,omitempty"`
	// Omitted says the content was left out: the files together exceed
	// the response's cap. Use a session to fetch large outputs.
	Omitted bool `json:"omitted,omitempty"`
}

// OneShotResult is a Result plus the output files.
type OneShotResult struct {
	*Result
	Files []OutputFile `json:"files"`
}

// MaxOneShotFiles caps the total content of output files returned inline.
const MaxOneShotFiles = 16 << 20

// RunOnce runs code once in a fresh jail and returns what it printed,
// displayed and wrote. The jail is gone when RunOnce returns.
func (m *Manager) RunOnce(ctx context.Context, req OneShotRequest, emit func(Event)) (*OneShotResult, error) {
	lang := req.Language
	if lang == "" {
		lang = "python"
	}
	rt, err := runtimes.Lookup(m.cfg, lang)
	if err != nil {
		return nil, err
	}
	limits, err := config.Resolve(req.Limits, m.cfg.Defaults, m.cfg.Max)
	if err != nil {
		return nil, err
	}
	if err := ValidateEnv(req.Env, m.cfg.Server.MaxEnv); err != nil {
		return nil, err
	}
	if len(req.Code) > MaxCode {
		return nil, fmt.Errorf("%w: code is larger than %d bytes", errdefs.ErrTooLarge, MaxCode)
	}
	type file struct {
		path string
		data []byte
	}
	var files []file
	total := int64(0)
	seen := map[string]bool{}
	for i, f := range req.Files {
		p, err := workspace.Clean(f.Path)
		if err != nil {
			return nil, err
		}
		if p == "" {
			return nil, fmt.Errorf("%w: files[%d]: empty path", errdefs.ErrInvalidArgument, i)
		}
		if seen[p] {
			return nil, fmt.Errorf("%w: files[%d]: %s is given twice", errdefs.ErrInvalidArgument, i, p)
		}
		seen[p] = true
		data := []byte(f.Content)
		if f.ContentBase64 != "" {
			if f.Content != "" {
				return nil, fmt.Errorf("%w: files[%d]: give content or content_base64, not both", errdefs.ErrInvalidArgument, i)
			}
			if data, err = base64.StdEncoding.DecodeString(f.ContentBase64); err != nil {
				return nil, fmt.Errorf("%w: files[%d]: content_base64: %v", errdefs.ErrInvalidArgument, i, err)
			}
		}
		total += int64(len(data))
		if int64(len(data)) > int64(m.cfg.Server.MaxFileBytes) || total > int64(limits.Disk) {
			return nil, fmt.Errorf("%w: files[%d]: the files exceed the file size or disk limit", errdefs.ErrTooLarge, i)
		}
		files = append(files, file{p, data})
	}

	// Take the execution slot first: a burst of one-shot requests must
	// queue before it builds jails, not after.
	release, err := m.acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer release()
	s, err := m.start(ctx, rt, limits, req.Env, time.Hour)
	if err != nil {
		return nil, err
	}
	defer func() {
		s.end("one-shot execution finished")
		<-s.gone
	}()
	for _, f := range files {
		if _, err := s.ws.Write(f.path, bytes.NewReader(f.data), int64(len(f.data)), 0o644); err != nil {
			return nil, err
		}
	}
	// The final event carries the files too, so it is sent here.
	var inner func(Event)
	if emit != nil {
		inner = func(e Event) {
			if e.Type != "end" {
				emit(e)
			}
		}
	}
	res, err := s.execute(ctx, ExecuteRequest{Code: req.Code, Timeout: limits.Timeout}, inner, true)
	if err != nil {
		return nil, err
	}
	out := &OneShotResult{Result: res, Files: []OutputFile{}}
	budget := int64(MaxOneShotFiles)
	for _, c := range res.FilesChanged {
		if c.Change == "deleted" {
			continue
		}
		of := OutputFile{Path: c.Path, Size: c.Size}
		if c.Size > budget {
			of.Omitted = true
		} else if f, e, err := s.ws.Open(c.Path); err == nil {
			data, err := io.ReadAll(io.LimitReader(f, budget+1))
			f.Close()
			if err == nil && int64(len(data)) <= budget {
				of.Size = e.Size
				of.ContentBase64 = base64.StdEncoding.EncodeToString(data)
				budget -= int64(len(data))
			} else {
				of.Omitted = true
			}
		} else {
			of.Omitted = true
		}
		out.Files = append(out.Files, of)
	}
	if emit != nil {
		emit(Event{Type: "end", Result: res, Files: out.Files})
	}
	return out, nil
}
