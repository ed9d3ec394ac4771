package controller

import (
	"testing"
	"time"
)

func TestBackoffDelayDoublesFromTenSecondsUpToTenMinutes(t *testing.T) {
	cases := []struct {
		failures int32
		want     time.Duration
	}{
		{-1, 0},
		{0, 0},
		{1, 10 * time.Second},
		{2, 20 * time.Second},
		{3, 40 * time.Second},
		{4, 80 * time.Second},
		{6, 320 * time.Second},
		{7, 10 * time.Minute}, // 640 s is past the cap
		{8, 10 * time.Minute},
		{100, 10 * time.Minute}, // 10 s × 2^99 would overflow a Duration
		{1 << 30, 10 * time.Minute},
	}
	for _, tc := range cases {
		if got := DefaultBackoff.Delay(tc.failures); got != tc.want {
			t.Errorf("Delay(%d) = %v, want %v", tc.failures, got, tc.want)
		}
	}
}

func TestBackoffDelayNeverDecreases(t *testing.T) {
	b := Backoff{Base: 3 * time.Second, Max: time.Hour}
	prev := time.Duration(0)
	for f := int32(0); f < 200; f++ {
		d := b.Delay(f)
		if d < prev || d > b.Max {
			t.Fatalf("Delay(%d) = %v after %v (max %v)", f, d, prev, b.Max)
		}
		prev = d
	}
}

func TestBackoffDelayWithBaseAboveMaxIsMax(t *testing.T) {
	b := Backoff{Base: time.Minute, Max: 30 * time.Second}
	if got := b.Delay(1); got != 30*time.Second {
		t.Errorf("Delay(1) = %v, want the cap 30s", got)
	}
}
