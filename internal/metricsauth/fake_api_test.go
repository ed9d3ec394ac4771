package metricsauth

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
)

// The answers no healthy kube-apiserver gives on cue, from an httptest
// server playing the two review APIs.

// fakeAPI answers TokenReviews with tokenStatus (or fails with
// tokenReviewCode) and SubjectAccessReviews with accessStatus, and keeps the
// access reviews it was sent.
type fakeAPI struct {
	tokenStatus     authenticationv1.TokenReviewStatus
	tokenReviewCode int
	accessStatus    authorizationv1.SubjectAccessReviewStatus

	mu            sync.Mutex
	accessReviews []authorizationv1.SubjectAccessReviewSpec
}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	switch req.URL.Path {
	case "/apis/authentication.k8s.io/v1/tokenreviews":
		if f.tokenReviewCode != 0 {
			w.WriteHeader(f.tokenReviewCode)
			_ = json.NewEncoder(w).Encode(metav1.Status{
				TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
				Status:   metav1.StatusFailure, Message: "down", Code: int32(f.tokenReviewCode),
			})
			return
		}
		_ = json.NewEncoder(w).Encode(authenticationv1.TokenReview{Status: f.tokenStatus})
	case "/apis/authorization.k8s.io/v1/subjectaccessreviews":
		var sar authorizationv1.SubjectAccessReview
		_ = json.NewDecoder(req.Body).Decode(&sar)
		f.mu.Lock()
		f.accessReviews = append(f.accessReviews, sar.Spec)
		f.mu.Unlock()
		_ = json.NewEncoder(w).Encode(authorizationv1.SubjectAccessReview{Status: f.accessStatus})
	default:
		http.NotFound(w, req)
	}
}

// newFakeGuarded is newGuarded against the fake API, retrying fast.
func newFakeGuarded(t *testing.T, api *fakeAPI) *guarded {
	t.Helper()
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	o := defaultOptions()
	o.backoff = wait.Backoff{Duration: time.Millisecond, Factor: 1.5, Steps: 5}
	return newGuarded(t, &rest.Config{Host: srv.URL}, o)
}

func TestReviewsCarryTheUserAndTheRequestAsTheAPIServerWouldSeeThem(t *testing.T) {
	api := &fakeAPI{
		tokenStatus: authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{
			Username: "alice", UID: "u-1", Groups: []string{"team"},
			Extra: map[string]authenticationv1.ExtraValue{"scopes": {"a", "b"}},
		}},
		accessStatus: authorizationv1.SubjectAccessReviewStatus{Allowed: true},
	}
	g := newFakeGuarded(t, api)
	g.expect(g.do(http.MethodGet, "/metrics", "bEaReR tok"), http.StatusOK, 1, 1)
	want := authorizationv1.SubjectAccessReviewSpec{
		User: "alice", UID: "u-1", Groups: []string{"team", "system:authenticated"},
		Extra:                 map[string]authorizationv1.ExtraValue{"scopes": {"a", "b"}},
		NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: "/metrics", Verb: "get"},
	}
	if got := api.accessReviews[0]; !jsonEqual(got, want) {
		t.Errorf("SubjectAccessReview spec\n got %+v\nwant %+v", got, want)
	}
}

func TestAuthenticatedGroupIsNotAddedTwiceNorToAnonymous(t *testing.T) {
	for _, user := range []authenticationv1.UserInfo{
		{Username: "bob", Groups: []string{"system:authenticated", "x"}},
		{Username: "carol", Groups: []string{"system:unauthenticated"}},
		{Username: "system:anonymous"},
	} {
		api := &fakeAPI{
			tokenStatus:  authenticationv1.TokenReviewStatus{Authenticated: true, User: user},
			accessStatus: authorizationv1.SubjectAccessReviewStatus{Allowed: true},
		}
		g := newFakeGuarded(t, api)
		g.expect(g.get("tok"), http.StatusOK, 1, 1)
		if got := api.accessReviews[0].Groups; !slices.Equal(got, user.Groups) {
			t.Errorf("%s: groups %v, want %v", user.Username, got, user.Groups)
		}
	}
}

func TestRejectionWithoutErrorIsCachedForAMinute(t *testing.T) {
	g := newFakeGuarded(t, &fakeAPI{tokenStatus: authenticationv1.TokenReviewStatus{Authenticated: false}})
	g.expect(g.get("tok"), http.StatusUnauthorized, 1, 0)
	g.clock.Step(59 * time.Second)
	g.expect(g.get("tok"), http.StatusUnauthorized, 1, 0)
	g.clock.Step(2 * time.Second)
	g.expect(g.get("tok"), http.StatusUnauthorized, 2, 0)
}

func TestAPIServerFailingIsRetriedThenInternalServerError(t *testing.T) {
	g := newFakeGuarded(t, &fakeAPI{tokenReviewCode: http.StatusInternalServerError})
	// Five tries (the backoff's steps), then 500; and nothing cached.
	g.expect(g.get("tok"), http.StatusInternalServerError, 5, 0)
	g.expect(g.get("tok"), http.StatusInternalServerError, 10, 0)
	if g.ran.Load() != 0 {
		t.Error("the metrics handler ran although the token was never checked")
	}
}

func TestAPIServerUnreachableIsInternalServerError(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	srv.Close()
	o := defaultOptions()
	o.backoff = wait.Backoff{Duration: time.Millisecond, Steps: 2}
	g := newGuarded(t, &rest.Config{Host: srv.URL}, o)
	g.expect(g.get("tok"), http.StatusInternalServerError, 1, 0) // connection refused is not retried
}

func TestAccessReviewBothAllowedAndDeniedIsInternalServerError(t *testing.T) {
	g := newFakeGuarded(t, &fakeAPI{
		tokenStatus:  authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{Username: "dave"}},
		accessStatus: authorizationv1.SubjectAccessReviewStatus{Allowed: true, Denied: true},
	})
	g.expect(g.get("tok"), http.StatusInternalServerError, 1, 1)
	if g.ran.Load() != 0 {
		t.Error("the metrics handler ran on a contradictory access review")
	}
}

func TestAccessReviewWithNoOpinionIsForbidden(t *testing.T) {
	g := newFakeGuarded(t, &fakeAPI{
		tokenStatus: authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{Username: "erin"}},
	})
	g.expect(g.get("tok"), http.StatusForbidden, 1, 1)
}

func TestTokenCacheKeysAreKeyedHashesNotTokens(t *testing.T) {
	g := newFakeGuarded(t, &fakeAPI{
		tokenStatus:  authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{Username: "frank"}},
		accessStatus: authorizationv1.SubjectAccessReviewStatus{Allowed: true},
	})
	g.expect(g.get("secret-token"), http.StatusOK, 1, 1)
	keys := g.filter.authn.cache.Keys()
	if len(keys) != 1 {
		t.Fatalf("%d keys cached, want 1", len(keys))
	}
	key, ok := keys[0].([32]byte)
	if !ok {
		t.Fatalf("cache key is a %T, want a [32]byte hash", keys[0])
	}
	other, err := newFilter(&rest.Config{Host: "http://unused"}, http.DefaultClient, defaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	if other.authn.tokenKey("secret-token") == key {
		t.Error("two processes hash a token alike: the hash key is not random")
	}
}

func jsonEqual(a, b any) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return string(ja) == string(jb)
}
