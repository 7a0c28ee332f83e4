package rules

import (
	"slices"
	"strings"
)

// String renders the window as type(parameters), e.g. tumbling(10s),
// sliding(60s/1s) or session(30s), for logs and messages.
func (w Window) String() string {
	switch w.Type {
	case Sliding:
		return "sliding(" + formatDuration(w.Size) + "/" + formatDuration(w.Slide) + ")"
	case Session:
		return "session(" + formatDuration(w.Gap) + ")"
	default:
		return "tumbling(" + formatDuration(w.Size) + ")"
	}
}

// windowTypes maps the type names of the file to window types.
var windowTypes = map[string]WindowType{
	"tumbling": Tumbling,
	"sliding":  Sliding,
	"session":  Session,
}

// windowParams lists the parameters each window type takes.
var windowParams = map[WindowType][]string{
	Tumbling: {"size"},
	Sliding:  {"size", "slide"},
	Session:  {"gap"},
}

// paramOwner says, for a parameter given to the wrong type, which types it
// belongs to.
var paramOwner = map[string]string{
	"size":  "size is only for tumbling and sliding windows",
	"slide": "slide is only for sliding windows",
	"gap":   "gap is only for session windows",
}

// window reads a window mapping such as {type: sliding, size: 60s, slide: 1s}.
func (c *checker) window(f field) Window {
	var w Window
	n := f.val
	fs, ok := c.mapping(n, "window", "type", "size", "slide", "gap")
	if !ok {
		return w
	}
	c.require(n, fs, "window", "type")
	known := false
	if tf, ok := fs["type"]; ok {
		if name, ok := c.str(tf); ok {
			w.Type, known = windowTypes[name]
			if !known {
				c.addf(tf.val.Line, "window type must be tumbling, sliding or session, got %q", name)
			}
		}
	}
	for _, p := range []string{"size", "slide", "gap"} {
		pf, ok := fs[p]
		if !ok {
			continue
		}
		// With an unknown type there is no telling which parameters
		// belong; their values are still worth checking.
		if known && !slices.Contains(windowParams[w.Type], p) {
			c.addf(pf.key.Line, "%s, not %s ones", paramOwner[p], w.Type)
			continue
		}
		d := c.duration(pf, positive)
		switch p {
		case "size":
			w.Size = d
		case "slide":
			w.Slide = d
		case "gap":
			w.Gap = d
		}
	}
	if known {
		for _, p := range windowParams[w.Type] {
			if _, ok := fs[p]; !ok {
				c.addf(n.Line, "missing field %q in window: %s windows need %s", p, w.Type, strings.Join(windowParams[w.Type], " and "))
			}
		}
	}
	if w.Type == Sliding && w.Size > 0 && w.Slide > w.Size {
		// Valid, as in Flink, but windows start every slide and last only
		// size: the time between them belongs to no window.
		c.warnf(fs["slide"].key.Line, "slide %s is larger than size %s: events in the last %s of every %s fall in no window (a slide <= size covers all time)",
			formatDuration(w.Slide), formatDuration(w.Size), formatDuration(w.Slide-w.Size), formatDuration(w.Slide))
	}
	return w
}
