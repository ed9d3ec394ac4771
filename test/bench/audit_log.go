package main

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// The API server writes one audit event per finished request of the two
// controllers' users (the policy auditPolicy writes): the request count of
// each controller, counted the same way for both, on the server side, and
// the requests it answered 429 (API Priority and Fairness's queues full).
// kube-controller-manager does not expose client-side
// rest_client_requests_total.
func auditPolicy(users ...string) string {
	quoted := make([]string, len(users))
	for i, u := range users {
		quoted[i] = strconv.Quote(u)
	}
	return `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived", "ResponseStarted"]
rules:
- level: Metadata
  users: [` + strings.Join(quoted, ", ") + `]
- level: None
`
}

func fileSize(p string) int64 {
	st, err := os.Stat(p)
	if err != nil {
		return 0
	}
	return st.Size()
}

// auditCount counts the events of user in the audit log from offset on,
// in total and by "verb resource[/subresource]", and those answered 429,
// leaving out those whose user agent ends with one of skipAgents (another
// program of the same user).
func auditCount(p string, offset int64, user string, skipAgents ...string) (n int, byVerb map[string]int, throttled int) {
	byVerb = map[string]int{}
	f, err := os.Open(p)
	if err != nil {
		return 0, byVerb, 0
	}
	defer f.Close()
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return 0, byVerb, 0
	}
	needle := `"username":` + strconv.Quote(user)
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<22)
	for sc.Scan() {
		l := sc.Bytes()
		if !strings.Contains(string(l), needle) {
			continue
		}
		var ev struct {
			Verb           string `json:"verb"`
			UserAgent      string `json:"userAgent"`
			ResponseStatus *struct {
				Code int `json:"code"`
			} `json:"responseStatus"`
			ObjectRef *struct {
				Resource    string `json:"resource"`
				Subresource string `json:"subresource"`
			} `json:"objectRef"`
		}
		if json.Unmarshal(l, &ev) != nil || slices.ContainsFunc(skipAgents, func(a string) bool { return strings.HasSuffix(ev.UserAgent, a) }) {
			continue
		}
		n++
		if ev.ResponseStatus != nil && ev.ResponseStatus.Code == http.StatusTooManyRequests {
			throttled++
		}
		k := ev.Verb
		if ev.ObjectRef != nil {
			k += " " + ev.ObjectRef.Resource
			if ev.ObjectRef.Subresource != "" {
				k += "/" + ev.ObjectRef.Subresource
			}
		}
		byVerb[k]++
	}
	return n, byVerb, throttled
}

func verbSummary(m map[string]int) string {
	type kv struct {
		k string
		v int
	}
	xs := make([]kv, 0, len(m))
	for k, v := range m {
		xs = append(xs, kv{k, v})
	}
	sort.Slice(xs, func(i, j int) bool { return xs[i].v > xs[j].v })
	var parts []string
	for i, x := range xs {
		if i == 6 {
			break
		}
		parts = append(parts, x.k+":"+itoa(x.v))
	}
	return strings.Join(parts, ", ")
}

func itoa(i int) string { return strconv.Itoa(i) }
