package kwokcluster

import (
	"bufio"
	"net"
	"strconv"
	"testing"
	"time"
)

// echoServer answers each line it reads on a connection with name and
// returns its port and a func that closes it.
func echoServer(t *testing.T, name string) (int, func()) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer func() { _ = c.Close() }()
				r := bufio.NewReader(c)
				for {
					if _, err := r.ReadString('\n'); err != nil {
						return
					}
					if _, err := c.Write([]byte(name + "\n")); err != nil {
						return
					}
				}
			}()
		}
	}()
	return l.Addr().(*net.TCPAddr).Port, func() { _ = l.Close() }
}

// ask sends a line through the forwarder on port and returns the answer,
// or "" if the connection closed without one.
func ask(t *testing.T, port int) string {
	t.Helper()
	c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte("hello\n")); err != nil {
		return ""
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return ""
	}
	return line[:len(line)-1]
}

func TestForwarderGoesToTheFirstBackendThatAccepts(t *testing.T) {
	firstPort, closeFirst := echoServer(t, "first")
	secondPort, closeSecond := echoServer(t, "second")
	defer closeSecond()
	f, err := startForwarder([]int{firstPort, secondPort})
	if err != nil {
		t.Fatal(err)
	}
	defer f.stop()

	if got := ask(t, f.port()); got != "first" {
		t.Errorf("with both backends up: answered by %q, want first", got)
	}
	closeFirst()
	if got := ask(t, f.port()); got != "second" {
		t.Errorf("with the first backend gone: answered by %q, want second", got)
	}
	closeSecond()
	if got := ask(t, f.port()); got != "" {
		t.Errorf("with no backend: answered by %q, want the connection closed", got)
	}
}

func TestForwarderDownClosesEveryConnection(t *testing.T) {
	port, closeBackend := echoServer(t, "backend")
	defer closeBackend()
	f, err := startForwarder([]int{port})
	if err != nil {
		t.Fatal(err)
	}
	defer f.stop()

	// A connection open before the outage is cut by it.
	open, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(f.port()), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = open.Close() }()
	r := bufio.NewReader(open)
	if _, err := open.Write([]byte("hello\n")); err != nil {
		t.Fatal(err)
	}
	if line, err := r.ReadString('\n'); err != nil || line != "backend\n" {
		t.Fatalf("before the outage: %q, %v", line, err)
	}
	f.setDown(true)
	_ = open.SetDeadline(time.Now().Add(5 * time.Second))
	_, _ = open.Write([]byte("hello\n"))
	if line, err := r.ReadString('\n'); err == nil {
		t.Errorf("the connection open at the outage answered %q, want it closed", line)
	}
	if got := ask(t, f.port()); got != "" {
		t.Errorf("during the outage: answered by %q, want the connection closed", got)
	}
	f.setDown(false)
	if got := ask(t, f.port()); got != "backend" {
		t.Errorf("after the outage: answered by %q, want backend", got)
	}
}
