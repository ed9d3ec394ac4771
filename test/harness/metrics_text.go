package harness

import (
	"bufio"
	"io"
	"strconv"
	"strings"
)

// SumSeries reads metrics in Prometheus' text format and sums the values of
// the series of the named metric whose labels hold every one of the given
// label pairs (written as in the text, `verb="POST"`).
func SumSeries(r io.Reader, metric string, labels ...string) (float64, error) {
	var sum float64
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, metric+"{")
		if !ok {
			continue
		}
		matched := true
		for _, l := range labels {
			matched = matched && strings.Contains(rest, l)
		}
		if !matched {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			return 0, err
		}
		sum += v
	}
	return sum, sc.Err()
}
