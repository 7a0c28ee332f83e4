package headless

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html"
	"regexp"
	"strconv"
	"strings"
)

// Cell is one cell of a heatmap drawing: a window of a heatmap and key,
// and a bucket of it by its upper bound as the heatmaps output writes it
// ("20", "+Inf").
type Cell struct {
	Heatmap, Key string
	Start, End   int64
	LE           string
}

var (
	figureOpen = regexp.MustCompile(`<figure class="heatmap" data-heatmap="([^"]*)" data-key="([^"]*)"`)
	column     = regexp.MustCompile(`<g class="col" data-start="(-?\d+)" data-end="(-?\d+)"`)
	cellRect   = regexp.MustCompile(`<rect class="cell"[^>]* data-le="([^"]+)" data-count="(\d+)"`)
)

// DOMCells reads the heatmap cells of a page's DOM, with their counts: a
// figure per heatmap and key, a group per window (column), a cell per
// bucket.
func DOMCells(dom string) (map[Cell]int64, error) {
	cells := map[Cell]int64{}
	figures := figureOpen.FindAllStringSubmatchIndex(dom, -1)
	for i, f := range figures {
		end := len(dom)
		if i+1 < len(figures) {
			end = figures[i+1][0]
		}
		heatmap, key := html.UnescapeString(dom[f[2]:f[3]]), html.UnescapeString(dom[f[4]:f[5]])
		figure := dom[f[1]:end]
		cols := column.FindAllStringSubmatchIndex(figure, -1)
		for j, col := range cols {
			colEnd := len(figure)
			if j+1 < len(cols) {
				colEnd = cols[j+1][0]
			}
			start, _ := strconv.ParseInt(figure[col[2]:col[3]], 10, 64)
			stop, _ := strconv.ParseInt(figure[col[4]:col[5]], 10, 64)
			for _, m := range cellRect.FindAllStringSubmatch(figure[col[1]:colEnd], -1) {
				n, _ := strconv.ParseInt(m[2], 10, 64)
				c := Cell{Heatmap: heatmap, Key: key, Start: start, End: stop, LE: m[1]}
				if _, dup := cells[c]; dup {
					return nil, fmt.Errorf("headless: cell %+v drawn twice", c)
				}
				cells[c] = n
			}
		}
	}
	return cells, nil
}

// RecordCells reads heatmap records, one JSON object each, as the cells
// they make: per heatmap, key and window the latest revision's buckets.
// The key is written name=value, joined by ", ", in the record's order,
// as the drawings label it.
func RecordCells(records []string) (map[Cell]int64, error) {
	type latest struct {
		revision int
		buckets  map[string]int64
	}
	windows := map[Cell]*latest{}
	for _, rec := range records {
		var h struct {
			Heatmap  string          `json:"heatmap"`
			Key      json.RawMessage `json:"key"`
			Window   struct{ Start, End int64 }
			Revision int `json:"revision"`
			Buckets  []struct {
				LE    json.RawMessage `json:"le"`
				Count int64           `json:"count"`
			} `json:"buckets"`
		}
		if err := json.Unmarshal([]byte(rec), &h); err != nil {
			return nil, fmt.Errorf("headless: %w: %s", err, rec)
		}
		key, err := pairs(h.Key)
		if err != nil {
			return nil, err
		}
		w := Cell{Heatmap: h.Heatmap, Key: key, Start: h.Window.Start, End: h.Window.End}
		if l := windows[w]; l != nil && l.revision > h.Revision {
			continue
		}
		l := &latest{revision: h.Revision, buckets: map[string]int64{}}
		for _, b := range h.Buckets {
			l.buckets[strings.Trim(string(b.LE), `"`)] = b.Count
		}
		windows[w] = l
	}
	cells := map[Cell]int64{}
	for w, l := range windows {
		for le, n := range l.buckets {
			c := w
			c.LE = le
			cells[c] = n
		}
	}
	return cells, nil
}

// pairs writes a JSON object's members name=value, strings unquoted.
func pairs(raw json.RawMessage) (string, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if _, err := dec.Token(); err != nil {
		return "", fmt.Errorf("headless: key %s: %w", raw, err)
	}
	var out []string
	for dec.More() {
		name, err := dec.Token()
		if err != nil {
			return "", fmt.Errorf("headless: key %s: %w", raw, err)
		}
		value, err := dec.Token()
		if err != nil {
			return "", fmt.Errorf("headless: key %s: %w", raw, err)
		}
		out = append(out, fmt.Sprintf("%v=%v", name, value))
	}
	return strings.Join(out, ", "), nil
}
