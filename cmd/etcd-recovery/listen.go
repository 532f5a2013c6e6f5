package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"
)

// listenUsage is --listen's usage, one meaning on serve and journal.
const listenUsage = "address of /metrics, /healthz and /livez"

// checkListen refuses a --listen that is not host:port ("" is none).
func checkListen(command, addr string) error {
	if addr == "" {
		return nil
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return usagef("%s: --listen %q: want host:port or :port", command, addr)
	}
	return nil
}

// serveHTTP serves h on addr until stop (which finishes the requests in
// flight within 5 s); a server that fails later is logged.
func serveHTTP(e *env, command, addr string, h http.Handler) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%s: listen on %s: %w", command, addr, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second,
		WriteTimeout: 60 * time.Second, IdleTimeout: 2 * time.Minute}
	e.log.Info(command+": serving /metrics, /livez and /healthz", "listen", ln.Addr().String())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			e.log.Error(command+": serving /metrics failed", "listen", ln.Addr().String(), "err", err)
		}
	}()
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-done
	}, nil
}
