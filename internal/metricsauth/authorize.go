package metricsauth

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/util/cache"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
)

// authorizer answers "may this user do this?" with a SubjectAccessReview.
type authorizer struct {
	client            rest.Interface
	backoff           wait.Backoff
	allowTTL, denyTTL time.Duration
	// cache maps the SHA-256 of a review's spec to its
	// SubjectAccessReviewStatus. Upstream keys on the spec's JSON itself;
	// the hash keeps every key 32 bytes however many groups a user has.
	cache *cache.LRUExpireCache
	// lane bounds the reviews in flight, with the authenticator's.
	lane chan struct{}
}

func newAuthorizer(cfg *rest.Config, httpClient *http.Client, o options) (*authorizer, error) {
	c, err := restClientFor(cfg, httpClient, authorizationv1.SchemeGroupVersion)
	if err != nil {
		return nil, err
	}
	return &authorizer{
		client:   c,
		backoff:  o.backoff,
		allowTTL: o.allowTTL,
		denyTTL:  o.denyTTL,
		cache:    cache.NewLRUExpireCacheWithClock(o.cacheSize, o.clock),
		lane:     o.lane,
	}, nil
}

// authorize reports whether user may apply verb to the non-resource path,
// and the API server's reason. An API server that says both allowed and
// denied is an error, as upstream; one that says neither denies.
func (a *authorizer) authorize(ctx context.Context, user *authenticationv1.UserInfo, path, verb string) (bool, string, error) {
	spec := authorizationv1.SubjectAccessReviewSpec{
		User:                  user.Username,
		UID:                   user.UID,
		Groups:                user.Groups,
		Extra:                 sarExtra(user.Extra),
		NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: path, Verb: verb},
	}
	specJSON, err := json.Marshal(spec)
	if err != nil {
		return false, "", err
	}
	key := sha256.Sum256(specJSON)

	var status authorizationv1.SubjectAccessReviewStatus
	if cached, ok := a.cache.Get(key); ok {
		status = cached.(authorizationv1.SubjectAccessReviewStatus)
	} else {
		leave, err := enter(a.lane)
		if err != nil {
			return false, "", err
		}
		result := &authorizationv1.SubjectAccessReview{}
		err = create(ctx, a.client, a.backoff, "subjectaccessreviews",
			&authorizationv1.SubjectAccessReview{Spec: spec}, result)
		leave()
		if err != nil {
			return false, "", err
		}
		status = result.Status
		ttl := a.denyTTL
		if status.Allowed {
			ttl = a.allowTTL
		}
		a.cache.Add(key, status, ttl)
	}

	if status.Allowed && status.Denied {
		return false, status.Reason, errors.New("subject access review returned both allow and deny response")
	}
	return status.Allowed, status.Reason, nil
}

func sarExtra(extra map[string]authenticationv1.ExtraValue) map[string]authorizationv1.ExtraValue {
	if extra == nil {
		return nil
	}
	out := make(map[string]authorizationv1.ExtraValue, len(extra))
	for k, v := range extra {
		out[k] = authorizationv1.ExtraValue(v)
	}
	return out
}
