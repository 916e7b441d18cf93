package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"airlock/internal/errdefs"
	"airlock/internal/session"
)

// errNoServer says no local server answered: run the program here.
var errNoServer = errors.New("no local airlock server")

// runRemote runs a program through the local server's socket, as
// POST /v1/run. The server takes a pre-started jail from its pool, so the
// program starts at once; the jail is the same as the one `airlock run`
// builds itself. It returns errNoServer, before sending anything, when no
// server listens at socket; any later failure is final (the program may
// have run).
func runRemote(ctx context.Context, socket string, req session.ProgramRequest, stream bool, stdout, stderr io.Writer) (*session.OneShotResult, error) {
	conn, err := net.DialTimeout("unix", socket, time.Second)
	if err != nil {
		return nil, errNoServer
	}
	used := false
	client := &http.Client{Transport: &http.Transport{
		DialContext: func(context.Context, string, string) (net.Conn, error) {
			if used {
				return nil, errors.New("one connection per run")
			}
			used = true
			return conn, nil
		},
		DisableCompression: true,
	}}
	defer client.CloseIdleConnections()
	body, err := json.Marshal(req)
	if err != nil {
		conn.Close()
		return nil, err
	}
	hreq, err := http.NewRequestWithContext(ctx, "POST", "http://airlock/v1/run", bytes.NewReader(body))
	if err != nil {
		conn.Close()
		return nil, err
	}
	hreq.Header.Set("Content-Type", "application/json")
	if stream {
		hreq.Header.Set("Accept", "application/x-ndjson")
	}
	resp, err := client.Do(hreq)
	if err != nil {
		return nil, fmt.Errorf("the local airlock server at %s: %w", socket, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		if json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&e) != nil || e.Error.Message == "" {
			return nil, fmt.Errorf("the local airlock server answered %s", resp.Status)
		}
		return nil, errdefs.FromCode(e.Error.Code, e.Error.Message)
	}
	if !stream {
		var res session.OneShotResult
		if err := json.NewDecoder(resp.Body).Decode(&res); err != nil || res.Result == nil {
			return nil, fmt.Errorf("the local airlock server sent a bad result: %v", err)
		}
		return &res, nil
	}
	// NDJSON: output as it happens, then one end event with the result.
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	for sc.Scan() {
		var ev session.Event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return nil, fmt.Errorf("the local airlock server sent a bad event: %v", err)
		}
		switch ev.Type {
		case "stdout", "stderr":
			w := stdout
			if ev.Type == "stderr" {
				w = stderr
			}
			data := []byte(ev.Text)
			if ev.DataBase64 != "" {
				if data, err = base64.StdEncoding.DecodeString(ev.DataBase64); err != nil {
					return nil, fmt.Errorf("the local airlock server sent bad output: %v", err)
				}
			}
			w.Write(data)
		case "end":
			if ev.Result == nil {
				return nil, errors.New("the local airlock server sent an end without a result")
			}
			return &session.OneShotResult{Result: ev.Result, Files: ev.Files, Limits: ev.Limits}, nil
		case "failed":
			if ev.Error == nil {
				return nil, errors.New("the local airlock server failed the run")
			}
			return nil, errdefs.FromCode(ev.Error.Name, ev.Error.Value)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("the local airlock server at %s: %w", socket, err)
	}
	return nil, errors.New("the local airlock server ended the stream without a result")
}
