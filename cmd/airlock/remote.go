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
// POST /v1/run. The server takes a pre-started jail from its pool, so the
// program starts at once; the jail is the same as the one `airlock run`
// builds itself. It returns errNoServer, before sending anything, when no
// server listens at socket; any later failure is final (the program may
// have run).
func runRemote(ctx context.Context, socket string, req apitype.ProgramRequest, stream bool, stdout, stderr io.Writer) (*apitype.OneShotResult, error) {
	c := client.Unix(socket)
	defer c.CloseIdleConnections()
	var onEvent func(apitype.Event)
	var outErr error
	if stream {
		// Output as it happens; the end event carries the result.
		onEvent = func(ev apitype.Event) {
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
					outErr = fmt.Errorf("the local airlock server sent bad output: %v", err)
					return
				}
			}
			w.Write(data)
		}
	}
	res, err := c.RunProgram(ctx, req, onEvent)
	var answered *client.Error
	switch {
	case errors.Is(err, client.ErrUnreachable):
		return nil, errNoServer
	case errors.As(err, &answered):
		return nil, err // the server's own words
	case err != nil:
		return nil, fmt.Errorf("the local airlock server at %s: %w", socket, err)
	case outErr != nil:
		return nil, outErr
	}
	return res, nil
}
