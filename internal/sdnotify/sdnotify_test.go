package sdnotify

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

func env(kv map[string]string) func(string) string {
	return func(k string) string { return kv[k] }
}

// listen opens a datagram socket like systemd's notify socket and returns its
// address (a path or an abstract '@' name).
func listen(t *testing.T, abstract bool) (string, *net.UnixConn) {
	t.Helper()
	addr := filepath.Join(t.TempDir(), "notify")
	if abstract {
		addr = "@sweep-sdnotify-test-" + strconv.Itoa(os.Getpid()) + "-" + t.Name()
	}
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: addr, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return addr, conn
}

func recv(t *testing.T, conn *net.UnixConn) string {
	t.Helper()
	buf := make([]byte, 4096)
	if err := conn.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	n, err := conn.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	return string(buf[:n])
}

func TestNotify(t *testing.T) {
	for _, abstract := range []bool{false, true} {
		t.Run("abstract="+strconv.FormatBool(abstract), func(t *testing.T) {
			addr, conn := listen(t, abstract)
			n := New(env(map[string]string{"NOTIFY_SOCKET": addr}))
			if !n.Enabled() {
				t.Fatal("not enabled with NOTIFY_SOCKET set")
			}
			for _, c := range []struct {
				send func() error
				want string
			}{
				{n.Ready, "READY=1"},
				{n.Watchdog, "WATCHDOG=1"},
				{n.Stopping, "STOPPING=1"},
				{func() error { return n.Notify("STATUS=pruning\nWATCHDOG=1") }, "STATUS=pruning\nWATCHDOG=1"},
			} {
				if err := c.send(); err != nil {
					t.Fatal(err)
				}
				if got := recv(t, conn); got != c.want {
					t.Errorf("got %q, want %q", got, c.want)
				}
			}
		})
	}
}

func TestNotifyOutsideSystemd(t *testing.T) {
	for _, n := range []*Notifier{nil, {}, New(env(nil))} {
		if n.Enabled() {
			t.Errorf("%+v: enabled without NOTIFY_SOCKET", n)
		}
		for _, f := range []func() error{n.Ready, n.Watchdog, n.Stopping} {
			if err := f(); err != nil {
				t.Errorf("no-op failed: %v", err)
			}
		}
	}
}

func TestNotifyErrors(t *testing.T) {
	for _, addr := range []string{"relative/path", "vsock:2:1234", filepath.Join(t.TempDir(), "missing")} {
		if err := New(env(map[string]string{"NOTIFY_SOCKET": addr})).Ready(); err == nil {
			t.Errorf("NOTIFY_SOCKET=%q: no error", addr)
		}
	}
}

func TestWatchdogInterval(t *testing.T) {
	const pid = 4242
	for _, c := range []struct {
		name    string
		env     map[string]string
		want    time.Duration
		ok, err bool
	}{
		{name: "unset", env: nil},
		{name: "set", env: map[string]string{"WATCHDOG_USEC": "30000000"}, want: 30 * time.Second, ok: true},
		{name: "our pid", env: map[string]string{"WATCHDOG_USEC": "500", "WATCHDOG_PID": "4242"}, want: 500 * time.Microsecond, ok: true},
		{name: "another pid", env: map[string]string{"WATCHDOG_USEC": "500", "WATCHDOG_PID": "1"}},
		{name: "bad pid", env: map[string]string{"WATCHDOG_USEC": "500", "WATCHDOG_PID": "x"}, err: true},
		{name: "zero", env: map[string]string{"WATCHDOG_USEC": "0"}, err: true},
		{name: "negative", env: map[string]string{"WATCHDOG_USEC": "-5"}, err: true},
		{name: "garbage", env: map[string]string{"WATCHDOG_USEC": "30s"}, err: true},
		{name: "overflow", env: map[string]string{"WATCHDOG_USEC": "18446744073709551615"}, err: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, ok, err := WatchdogInterval(env(c.env), pid)
			if (err != nil) != c.err || ok != c.ok || got != c.want {
				t.Errorf("got (%v, %v, %v), want (%v, %v, error %v)", got, ok, err, c.want, c.ok, c.err)
			}
		})
	}
}

func FuzzWatchdogInterval(f *testing.F) {
	for _, s := range []string{"", "0", "1", "30000000", "-1", "1e6", "18446744073709551615", "9223372036854775"} {
		f.Add(s, "")
		f.Add(s, "7")
	}
	f.Fuzz(func(t *testing.T, usec, pid string) {
		d, ok, err := WatchdogInterval(env(map[string]string{"WATCHDOG_USEC": usec, "WATCHDOG_PID": pid}), 7)
		if ok && (err != nil || d <= 0) {
			t.Fatalf("ok with d=%v err=%v", d, err)
		}
		if !ok && d != 0 {
			t.Fatalf("not ok but d=%v", d)
		}
	})
}
