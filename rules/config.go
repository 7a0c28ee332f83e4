package rules

import (
	"time"

	"go.yaml.in/yaml/v4"
)

// defaultWatermark, defaultDedupe and defaultSkew are the settings of a
// file that leaves them out, as documented on WatermarkConfig, DedupeConfig
// and SkewConfig.
var (
	defaultWatermark = WatermarkConfig{
		OutOfOrderness:  2 * time.Second,
		IdleTimeout:     10 * time.Second,
		AllowedLateness: 0,
		MaxAhead:        time.Hour,
	}
	defaultDedupe = DedupeConfig{Horizon: 10 * time.Second}
	defaultSkew   = SkewConfig{
		Threshold:    15 * time.Millisecond,
		RecoverAfter: 5 * time.Second,
		Scope:        ScopeSource,
		MaxSources:   10000,
	}
)

// config checks the top level of the file; root is nil for an empty file.
func (c *checker) config(root *yaml.Node) *Config {
	cfg := &Config{Watermark: defaultWatermark, Skew: defaultSkew, Dedupe: defaultDedupe}
	if root == nil || isNull(root) {
		c.addf(0, "no rules or heatmaps: the file has nothing to evaluate")
		return cfg
	}
	fs, ok := c.mapping(root, "rules file", "watermark", "skew", "dedupe", "rules", "heatmaps")
	if !ok {
		return cfg
	}
	if f, ok := fs["watermark"]; ok {
		c.watermark(f.val, &cfg.Watermark)
	}
	if f, ok := fs["skew"]; ok {
		c.skew(f.val, &cfg.Skew)
	}
	if f, ok := fs["dedupe"]; ok && !isNull(f.val) {
		if ds, ok := c.mapping(f.val, "dedupe", "horizon"); ok {
			if h, ok := ds["horizon"]; ok {
				cfg.Dedupe.Horizon = c.duration(h, zeroAllowed)
			}
		}
	}
	rules, rulesOK := c.list(fs["rules"], "rules")
	heatmaps, heatmapsOK := c.list(fs["heatmaps"], "heatmaps")
	// A malformed section is reported already; saying that it holds nothing
	// too would only add noise.
	if rulesOK && heatmapsOK && len(rules)+len(heatmaps) == 0 {
		c.addf(0, "no rules or heatmaps: the file has nothing to evaluate")
	}
	ruleNames := map[string]int{}
	for _, item := range rules {
		cfg.Rules = append(cfg.Rules, c.rule(item, ruleNames))
	}
	heatmapNames := map[string]int{}
	for _, item := range heatmaps {
		cfg.Heatmaps = append(cfg.Heatmaps, c.heatmap(item, heatmapNames))
	}
	return cfg
}

// watermark overrides the defaults in wm with the fields of n.
func (c *checker) watermark(n *yaml.Node, wm *WatermarkConfig) {
	if isNull(n) {
		return
	}
	fs, ok := c.mapping(n, "watermark", "out_of_orderness", "idle_timeout", "allowed_lateness", "max_ahead")
	if !ok {
		return
	}
	if f, ok := fs["out_of_orderness"]; ok {
		wm.OutOfOrderness = c.duration(f, zeroAllowed)
	}
	if f, ok := fs["idle_timeout"]; ok {
		wm.IdleTimeout = c.duration(f, positive)
	}
	if f, ok := fs["allowed_lateness"]; ok {
		wm.AllowedLateness = c.duration(f, zeroAllowed)
	}
	if f, ok := fs["max_ahead"]; ok {
		wm.MaxAhead = c.duration(f, positive)
	}
}

// skew overrides the defaults in sk with the fields of n.
func (c *checker) skew(n *yaml.Node, sk *SkewConfig) {
	if isNull(n) {
		return
	}
	fs, ok := c.mapping(n, "skew", "threshold", "recover_after", "scope", "max_sources")
	if !ok {
		return
	}
	if f, ok := fs["threshold"]; ok {
		sk.Threshold = c.duration(f, positive)
	}
	if f, ok := fs["recover_after"]; ok {
		sk.RecoverAfter = c.duration(f, zeroAllowed)
	}
	if f, ok := fs["scope"]; ok {
		if i, ok := c.choice(f, ScopeSource.String(), ScopeJob.String()); ok {
			sk.Scope = Scope(i)
		}
	}
	if f, ok := fs["max_sources"]; ok {
		if v, ok := c.wholeNumber(f, "max_sources", 1); ok {
			sk.MaxSources = int(v)
		}
	}
}
