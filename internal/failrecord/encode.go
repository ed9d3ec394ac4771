package failrecord

import (
	"bytes"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// A shard's encoding is text, one attempt a line, so that `kubectl get
// configmap -o yaml` reads it too: nine fields separated by tabs,
//
//	index attempt time node container exit reason rule action
//
// with time in RFC 3339 (UTC, seconds) and "-" for an empty field. It is
// the value of DataKey in the shard's ConfigMap.

// DataKey is the ConfigMap data key that holds a shard's attempts.
const DataKey = "attempts"

const fields = 9

// maxLineBytes is the longest line an attempt can take: each field at its
// bound, the separators and the newline.
const maxLineBytes = 10 + 10 + len(time.RFC3339) + maxNode + maxContainer + 11 + maxReason + maxRule + maxReason + fields

// EncodeShard encodes shard's attempts, at most MaxShardBytes: if they
// would take more, the oldest attempts of the indexes that have the most
// are left out first, and every index keeps its last one.
func (r *Record) EncodeShard(shard int) []byte {
	return encode(trim(r.shardAttempts(shard)))
}

func encode(attempts []Attempt) []byte {
	var b bytes.Buffer
	for _, a := range attempts {
		b.WriteString(line(a))
	}
	return b.Bytes()
}

func line(a Attempt) string {
	exit := ""
	if a.HasExit {
		exit = strconv.Itoa(int(a.ExitCode))
	}
	parts := []string{
		strconv.Itoa(int(a.Index)), strconv.Itoa(int(a.Attempt)), a.Time.UTC().Format(time.RFC3339),
		a.Node, a.Container, exit, a.Reason, a.Rule, string(a.Action),
	}
	for i, p := range parts {
		if p == "" {
			parts[i] = "-"
		}
	}
	return strings.Join(parts, "\t") + "\n"
}

// trim leaves out attempts until the encoding fits MaxShardBytes: each
// round drops the oldest attempt of the index that has the most (the
// lowest such index first). attempts are by index then attempt.
func trim(attempts []Attempt) []Attempt {
	size := 0
	for _, a := range attempts {
		size += len(line(a))
	}
	if size <= MaxShardBytes {
		return attempts
	}
	byIndex := map[int32][]Attempt{}
	var order []int32
	for _, a := range attempts {
		if _, ok := byIndex[a.Index]; !ok {
			order = append(order, a.Index)
		}
		byIndex[a.Index] = append(byIndex[a.Index], a)
	}
	for size > MaxShardBytes {
		most := int32(-1)
		for _, ix := range order {
			if len(byIndex[ix]) > 1 && (most < 0 || len(byIndex[ix]) > len(byIndex[most])) {
				most = ix
			}
		}
		if most < 0 {
			break // every index is down to its last attempt, which fits
		}
		size -= len(line(byIndex[most][0]))
		byIndex[most] = byIndex[most][1:]
	}
	out := make([]Attempt, 0, len(attempts))
	for _, ix := range order {
		out = append(out, byIndex[ix]...)
	}
	return out
}

// DecodeShard reads a shard's encoding. A line it cannot read is skipped
// and counted in bad: the record is the operator's, but a user may have
// edited the ConfigMap, and what is left must still be read.
func DecodeShard(data string) (attempts []Attempt, bad int) {
	for l := range strings.SplitSeq(data, "\n") {
		if l == "" {
			continue
		}
		a, err := parseLine(l)
		if err != nil {
			bad++
			continue
		}
		attempts = append(attempts, bounded(a))
	}
	slices.SortStableFunc(attempts, func(x, y Attempt) int {
		if x.Index != y.Index {
			return int(x.Index - y.Index)
		}
		return int(x.Attempt - y.Attempt)
	})
	return attempts, bad
}

func parseLine(l string) (Attempt, error) {
	p := strings.Split(l, "\t")
	if len(p) != fields {
		return Attempt{}, fmt.Errorf("%d fields, want %d", len(p), fields)
	}
	for i := range p {
		if p[i] == "-" {
			p[i] = ""
		}
	}
	ix, err := strconv.ParseInt(p[0], 10, 32)
	if err != nil || ix < 0 {
		return Attempt{}, fmt.Errorf("index %q", p[0])
	}
	att, err := strconv.ParseInt(p[1], 10, 32)
	if err != nil || att < 0 {
		return Attempt{}, fmt.Errorf("attempt %q", p[1])
	}
	at, err := time.Parse(time.RFC3339, p[2])
	if err != nil {
		return Attempt{}, err
	}
	a := Attempt{
		Index: int32(ix), Attempt: int32(att), Time: at, Node: p[3], Container: p[4],
		Reason: p[6], Rule: p[7], Action: Action(p[8]),
	}
	if p[5] != "" {
		code, err := strconv.ParseInt(p[5], 10, 32)
		if err != nil {
			return Attempt{}, fmt.Errorf("exit code %q", p[5])
		}
		a.ExitCode, a.HasExit = int32(code), true
	}
	return a, nil
}

// clean makes s fit one field: no separator, no line break, at most n
// bytes (cut at a rune boundary).
func clean(s string, n int) string {
	if strings.ContainsAny(s, "\t\n\r") {
		s = strings.NewReplacer("\t", " ", "\n", " ", "\r", " ").Replace(s)
	}
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}

func utf8RuneStart(b byte) bool { return b&0xC0 != 0x80 }
