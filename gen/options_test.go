package gen

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestValidate(t *testing.T) {
	if err := DefaultOptions().Validate(); err != nil {
		t.Fatalf("DefaultOptions: %v", err)
	}

	// Every mistake is reported at once.
	err := Options{}.Validate()
	if err == nil {
		t.Fatal("zero Options accepted")
	}
	for _, want := range []string{"users", "sources", "rate"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("zero Options: error %q does not mention %s", err, want)
		}
	}

	cases := []struct {
		name string
		edit func(*Options)
		want []string
	}{
		{"negative events", func(o *Options) { o.Events = -1 }, []string{"events must be >= 0"}},
		{"infinite rate", func(o *Options) { o.Rate = math.Inf(1) }, []string{"rate must be"}},
		{"negative delays", func(o *Options) { o.Jitter, o.Batching = -1, -time.Second },
			[]string{"jitter must be >= 0", "batching must be >= 0"}},
		{"fractions", func(o *Options) { o.LateFraction, o.InvalidFraction, o.RFC3339Fraction = 0.7, 0.6, math.NaN() },
			[]string{"late fraction + invalid fraction", "rfc3339 fraction must be in [0, 1]"}},
		{"negative rates", func(o *Options) { o.BurstRate, o.ScrapeRate = -1, math.NaN() },
			[]string{"burst rate must be", "scrape rate must be"}},
		{"user distribution", func(o *Options) { o.UserDist, o.DevicesPerUser = "pareto", -1 },
			[]string{`user distribution must be "zipf" or "uniform", got "pareto"`, "devices per user must be in"}},
		{"attack", func(o *Options) {
			o.AttackStart, o.AttackDuration, o.AttackShare, o.AttackUsers = -time.Second, time.Second, 1.5, o.Users+1
		}, []string{"attack start must be >= 0", "attack share must be in [0, 1]", "attack users must be in [1, users = 10000]"}},
		{"amount share", func(o *Options) { o.AmountShare = -0.1 }, []string{"amount share must be in [0, 1]"}},
		{"attack duration", func(o *Options) { o.AttackDuration = -1 }, []string{"attack duration must be >= 0"}},
		{"anomalies beyond rate", func(o *Options) { o.Rate = 10 }, []string{"no room under rate 10"}},
		{"clocks", func(o *Options) {
			o.Clocks = []Clock{
				{Source: "gw-4"},
				{Source: "gw-1", StepAt: -time.Second},
				{Source: "gw-1", DriftPPM: 2e6},
			}
		}, []string{`unknown source "gw-4": sources are gw-0..gw-3`, "gw-1 given twice", "step time must be >= 0", "drift must be within"}},
	}
	for _, tc := range cases {
		o := DefaultOptions()
		tc.edit(&o)
		err := o.Validate()
		if err == nil {
			t.Errorf("%s: accepted", tc.name)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not say %q", tc.name, err, w)
			}
		}
	}
}
