package harness

import (
	"strings"
	"testing"
)

func TestSumSeries(t *testing.T) {
	text := `# HELP apiserver_request_total Counter of apiserver requests.
apiserver_request_total{code="201",resource="pods",verb="POST"} 7
apiserver_request_total{code="403",resource="pods",verb="POST"} 3
apiserver_request_total{code="403",resource="pods",verb="POST",subresource="x"} 2
apiserver_request_total{code="200",resource="pods",verb="GET"} 100
apiserver_request_total_other{code="403",resource="pods",verb="POST"} 50
`
	for _, tc := range []struct {
		labels []string
		want   float64
	}{
		{nil, 112},
		{[]string{`verb="POST"`}, 12},
		{[]string{`resource="pods"`, `verb="POST"`, `code="403"`}, 5},
		{[]string{`resource="jobs"`}, 0},
	} {
		got, err := SumSeries(strings.NewReader(text), "apiserver_request_total", tc.labels...)
		if err != nil || got != tc.want {
			t.Errorf("SumSeries(%v) = %v, %v; want %v", tc.labels, got, err, tc.want)
		}
	}
	if _, err := SumSeries(strings.NewReader("m{a=\"b\"} x\n"), "m"); err == nil {
		t.Error("an unreadable value gave no error")
	}
}
