package oneshot

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/emptypb"
)

// FinalizeCleanupProcedure is spectro-cleanup's endpoint: proto package
// cleanup.v1, service CleanupService, method FinalizeCleanup. Its request
// and response messages are empty, so google.protobuf.Empty is
// wire-identical to them in both protobuf and JSON encodings.
const FinalizeCleanupProcedure = "/cleanup.v1.CleanupService/FinalizeCleanup"

// FinalizeServer answers FinalizeCleanup over gRPC, gRPC-Web and the
// Connect protocol. The first call closes Done; later calls answer OK and
// change nothing. A call that comes before the cleanup is ready to wait for
// it is remembered, not refused.
type FinalizeServer struct {
	log   *slog.Logger
	once  sync.Once
	done  chan struct{}
	calls atomic.Int64
}

// NewFinalizeServer returns a server whose Done channel is open.
func NewFinalizeServer(log *slog.Logger) *FinalizeServer {
	return &FinalizeServer{log: logger(log), done: make(chan struct{})}
}

// Done is closed by the first FinalizeCleanup call.
func (s *FinalizeServer) Done() <-chan struct{} { return s.done }

// Calls returns how many FinalizeCleanup calls were answered.
func (s *FinalizeServer) Calls() int64 { return s.calls.Load() }

// Handler returns the path to mount and its handler.
func (s *FinalizeServer) Handler() (string, http.Handler) {
	h := connect.NewUnaryHandler(FinalizeCleanupProcedure,
		func(ctx context.Context, _ *connect.Request[emptypb.Empty]) (*connect.Response[emptypb.Empty], error) {
			n := s.calls.Add(1)
			s.once.Do(func() { close(s.done) })
			s.log.Info("FinalizeCleanup called", "calls", n)
			return connect.NewResponse(&emptypb.Empty{}), nil
		},
		connect.WithReadMaxBytes(1<<10),
	)
	return FinalizeCleanupProcedure, h
}

// Serve answers on l until ctx ends, then shuts down gracefully. It speaks
// HTTP/1.1 (Connect) and cleartext HTTP/2 (gRPC) on the same port, as
// spectro-cleanup's h2c server does.
func (s *FinalizeServer) Serve(ctx context.Context, l net.Listener) error {
	mux := http.NewServeMux()
	mux.Handle(s.Handler())
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	srv := &http.Server{
		Handler:           mux,
		Protocols:         &protocols,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      10 * time.Second,
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(l) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := srv.Shutdown(shutCtx)
	if serr := <-errc; !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	return err
}
