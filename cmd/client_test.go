package main

import (
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
)

// The manager's clients ask for their answers uncompressed: no request
// says it accepts gzip, so kube-apiserver never gzips a watch's events.
func TestManagerClientsAskForAnswersUncompressed(t *testing.T) {
	var mu sync.Mutex
	var accepts []string
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		accepts = append(accepts, r.Header.Get("Accept-Encoding"))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"major":"1","minor":"37","gitVersion":"v1.37.2"}`))
	}))
	defer srv.Close()
	// Served over TLS, as kube-apiserver is: client-go builds a transport
	// of its own, which honours the setting, only for a TLS config.
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	config := func() *rest.Config {
		return &rest.Config{Host: srv.URL, TLSClientConfig: rest.TLSClientConfig{CAData: ca}}
	}
	for _, c := range []struct {
		name     string
		cfg      *rest.Config
		wantGzip bool
	}{
		{"client-go's default", config(), true},
		{"the manager's", uncompressed(config()), false},
	} {
		mu.Lock()
		accepts = nil
		mu.Unlock()
		d, err := discovery.NewDiscoveryClientForConfig(c.cfg)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := d.ServerVersion(); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		mu.Lock()
		got := accepts
		mu.Unlock()
		if len(got) == 0 {
			t.Fatalf("%s: no request reached the server", c.name)
		}
		for _, a := range got {
			if gzip := a == "gzip"; gzip != c.wantGzip {
				t.Errorf("%s client sent Accept-Encoding %q, want gzip accepted: %v", c.name, a, c.wantGzip)
			}
		}
	}
}
