package oneshot

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/emptypb"
)

// startFinalize serves a FinalizeServer on a loopback port.
func startFinalize(t *testing.T) (*FinalizeServer, string) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := NewFinalizeServer(nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, l) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return s, "http://" + l.Addr().String()
}

// h2cClient speaks cleartext HTTP/2 only, as gRPC clients do.
func h2cClient() *http.Client {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: &http.Transport{Protocols: &p}, Timeout: 10 * time.Second}
}

func TestFinalizeCleanupGRPC(t *testing.T) {
	s, base := startFinalize(t)
	client := connect.NewClient[emptypb.Empty, emptypb.Empty](h2cClient(), base+FinalizeCleanupProcedure, connect.WithGRPC())
	for i := range 2 {
		resp, err := client.CallUnary(context.Background(), connect.NewRequest(&emptypb.Empty{}))
		if err != nil {
			t.Fatalf("call %d: %v", i+1, err)
		}
		if ct := resp.Header().Get("Content-Type"); !strings.HasPrefix(ct, "application/grpc") {
			t.Fatalf("call %d: content type %q, want gRPC", i+1, ct)
		}
	}
	select {
	case <-s.Done():
	default:
		t.Fatal("Done not closed after FinalizeCleanup")
	}
	if n := s.Calls(); n != 2 {
		t.Fatalf("%d calls counted, want 2", n)
	}
}

func TestFinalizeCleanupConnectHTTP1(t *testing.T) {
	s, base := startFinalize(t)
	for i := range 2 {
		req, err := http.NewRequest(http.MethodPost, base+FinalizeCleanupProcedure, strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
		if err != nil {
			t.Fatalf("call %d: %v", i+1, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.ProtoMajor != 1 || strings.TrimSpace(string(body)) != "{}" {
			t.Fatalf("call %d: %s %s %q, want HTTP/1.1 200 {}", i+1, resp.Proto, resp.Status, body)
		}
	}
	select {
	case <-s.Done():
	default:
		t.Fatal("Done not closed after FinalizeCleanup")
	}
}

func TestFinalizeCleanupRejectsOtherPaths(t *testing.T) {
	_, base := startFinalize(t)
	resp, err := http.Post(base+"/cleanup.v1.CleanupService/Other", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("status %d, want 404", resp.StatusCode)
	}
}
