package main

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"

	"airlock/internal/apitype"
	"airlock/internal/client"
)

// errNoServer says no local server answered: run the program here.
var errNoServer = errors.New("no local airlock server")

// runRemote runs a program through the local server's socket, as
// POST /v1/run, its events (if it is streamed) to emit. The server takes
// a pre-started jail from its pool, so the program starts at once; the
// jail and the path are the ones `airlock run --cold` builds itself. It
// returns errNoServer, before sending anything, when no server listens
// at socket; any later failure is final (the program may have run).
func runRemote(ctx context.Context, socket string, req apitype.ProgramRequest, emit func(apitype.Event)) (*apitype.OneShotResult, error) {
	c := client.Unix(socket)
	defer c.CloseIdleConnections()
	res, err := c.RunProgram(ctx, req, emit)
	var answered *client.Error
	switch {
	case errors.Is(err, client.ErrUnreachable):
		return nil, errNoServer
	case errors.As(err, &answered):
		return nil, err // the server's own words
	case err != nil:
		return nil, fmt.Errorf("the local airlock server at %s: %w", socket, err)
	}
	return res, nil
}

// stream writes a run's output events to stdout and stderr as they come
// (the end event carries the result); output it cannot decode sets *bad.
func stream(stdout, stderr io.Writer, bad *error) func(apitype.Event) {
	return func(ev apitype.Event) {
		w := stdout
		switch ev.Type {
		case apitype.EventStdout:
		case apitype.EventStderr:
			w = stderr
		default:
			return
		}
		data := []byte(ev.Text)
		if ev.DataBase64 != "" {
			var err error
			if data, err = base64.StdEncoding.DecodeString(ev.DataBase64); err != nil {
				*bad = fmt.Errorf("the program's output came undecodable: %v", err)
				return
			}
		}
		w.Write(data)
	}
}
