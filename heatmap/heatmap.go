// Package heatmap accumulates the latency distribution of one window and key:
// count, exact min and max, per-bucket counts for the configured upper bounds,
// and a DDSketch for quantiles with a bounded relative error. Accumulators are
// mergeable, which is what lets sliding windows be built from panes.
package heatmap

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"sort"
	"sync"

	"github.com/riskstream/riskstream/internal/corrupt"

	"github.com/DataDog/sketches-go/ddsketch"
	"github.com/DataDog/sketches-go/ddsketch/mapping"
	"github.com/DataDog/sketches-go/ddsketch/store"
)

// RelativeAccuracy is the sketch's guaranteed relative error on quantiles, the
// bound of 1% that docs/outputs.md "heatmap" states.
const RelativeAccuracy = 0.01

// indexMapping is shared by every sketch: they must agree to merge, and
// encoding omits it.
var indexMapping = func() mapping.IndexMapping {
	m, err := mapping.NewLogarithmicMapping(RelativeAccuracy)
	if err != nil {
		panic(err) // a constant accuracy in range never fails
	}
	return m
}()

// Acc is the distribution of a numeric field within one pane or window.
//
// What a quantile reads (Count, Min, Max, sketch, few) comes first, in 88
// bytes: two cache lines, which a decision over a cold key's panes misses.
type Acc struct {
	Count int64
	Min   float64
	Max   float64
	// sketch holds the values' bins, nil while there are no more than
	// fewValues: few holds each value's bin then (fewBin), in the order
	// they came. Most panes of a key among many hold a value or two, and
	// a sketch's dense store takes a kilobyte or more; the answers are the
	// sketch's all the same. With a sketch, few holds the bins of the
	// highest values, highest first (see topQuantile).
	sketch   *ddsketch.DDSketch
	few      [fewValues]int32
	Degraded int64
	// Buckets[i] counts values v with bounds[i-1] < v <= bounds[i]; the last
	// element is the +Inf bucket.
	Buckets []int64
}

// fewValues is how many values an accumulator keeps before it makes a
// sketch of them.
const fewValues = 12

// fewBin returns the bin the sketch puts v in (memo as in Add), as few
// holds it: 0 for the zero bin, a positive index's distance above the
// lowest index, plus one, and the negative of that for a negative value's
// index.
func fewBin(v float64, memo *IndexMemo) int32 {
	switch v = clampForSketch(v); {
	case v > minIndexable && memo != nil:
		return int32(memo.index(v) - minIndex + 1)
	case v > minIndexable:
		return int32(indexMapping.Index(v) - minIndex + 1)
	case v < -minIndexable:
		return -int32(indexMapping.Index(-v) - minIndex + 1)
	}
	return 0
}

// addBin adds one value in bin b (as fewBin returns it) to s.
func addBin(s *ddsketch.DDSketch, b int32) {
	switch {
	case b > 0:
		s.GetPositiveValueStore().Add(int(b) - 1 + minIndex)
	case b < 0:
		s.GetNegativeValueStore().Add(int(-b) - 1 + minIndex)
	default:
		_ = s.Add(0)
	}
}

// New returns an empty accumulator for a heatmap with nBounds finite bucket
// bounds.
func New(nBounds int) *Acc {
	return &Acc{Buckets: make([]int64, nBounds+1)}
}

func newSketch() *ddsketch.DDSketch {
	return ddsketch.NewDDSketch(indexMapping, store.NewDenseStore(), store.NewDenseStore())
}

// sketchOf returns a's sketch, made from its few values if it has none:
// they are then its highest values (see topQuantile), sorted.
func (a *Acc) sketchOf() *ddsketch.DDSketch {
	if a.sketch == nil {
		a.sketch = a.fewSketch(newSketch())
		top := a.few[:a.Count]
		slices.SortFunc(top, func(x, y int32) int { return cmp.Compare(y, x) })
		if len(top) > 0 && top[len(top)-1] <= 0 {
			a.few[0] = noTop
		}
	}
	return a.sketch
}

// noTop in few[0] marks an accumulator with a sketch whose few does not
// hold its highest values' bins: one of its values is zero or negative,
// whose order the sketch keeps apart, and Quantile asks the sketch.
const noTop = math.MinInt32

// topLen is how many of the highest values' bins few holds with a sketch.
func (a *Acc) topLen() int { return int(min(a.Count, fewValues)) }

// addTop adds bin b to the highest values' bins few holds, n of them:
// a value the sketch took, which a.Count does not count yet.
func (a *Acc) addTop(n int, b int32) {
	if n > 0 && a.few[0] == noTop {
		return
	}
	if b <= 0 {
		a.few[0] = noTop
		return
	}
	if n == fewValues {
		if b <= a.few[n-1] {
			return
		}
		n-- // the lowest goes
	}
	i := n
	for ; i > 0 && a.few[i-1] < b; i-- {
		a.few[i] = a.few[i-1]
	}
	a.few[i] = b
}

// topQuantile is the sketch's GetValueAtQuantile read from the highest
// values' bins, when the rank falls among them and every value is
// positive: a quantile near the top of a distribution, for which the
// sketch walks its bins from the lowest.
func (a *Acc) topQuantile(q float64) (float64, bool) {
	n := a.topLen()
	if n == 0 || a.few[0] == noTop {
		return 0, false
	}
	i := fromTop(q, a.Count)
	if i >= int64(n) {
		return 0, false
	}
	return indexMapping.Value(int(a.few[i]) - 1 + minIndex), true
}

// fromTop is where the value GetValueAtQuantile gives for quantile q of n
// values is among them, counted from the highest (0): the key of the
// value at position rank q×(n−1) from the lowest (KeyAtRank).
func fromTop(q float64, n int64) int64 {
	rank := float64(q * float64(n-1))
	return max(0, n-1-int64(max(rank, 0)))
}

// rebuildTop sets the highest values' bins from the sketch, as decoded:
// none (noTop) when the sketch does not hold Count positive values.
func (a *Acc) rebuildTop() {
	a.few[0] = noTop
	if a.sketch.GetZeroCount() != 0 || !a.sketch.GetNegativeValueStore().IsEmpty() || a.sketch.GetCount() != float64(a.Count) {
		return
	}
	// The last fewValues of the values, from the lowest, in a ring: a
	// bin's count past fewValues adds nothing to them.
	var ring [fewValues]int32
	seen := 0
	a.sketch.GetPositiveValueStore().ForEach(func(index int, count float64) bool {
		n := fewValues
		if count < fewValues {
			n = int(count)
		}
		for range n {
			ring[seen%fewValues], seen = int32(index-minIndex+1), seen+1
		}
		return false
	})
	if seen < a.topLen() {
		return
	}
	for i := range a.topLen() {
		a.few[i] = ring[(seen-1-i)%fewValues]
	}
}

// IndexMemo remembers the sketch indexes of recent values for Add:
// latencies in milliseconds with a decimal or two take few distinct values
// and repeat, and an index costs a logarithm. A goroutine adding values needs
// one of its own; the zero value is ready.
type IndexMemo struct {
	entries [1 << indexMemoBits]memoEntry
}

const indexMemoBits = 10

type memoEntry struct {
	bits  uint64 // the value's bits; 0, the bits of +0, marks a free entry
	index int
}

// index returns the sketch's index of v, a value above its smallest
// indexable one: remembered, or computed and remembered in place of the
// entry's last value.
func (m *IndexMemo) index(v float64) int {
	bits := math.Float64bits(v)
	e := &m.entries[bits*0x9e3779b97f4a7c15>>(64-indexMemoBits)]
	if e.bits != bits {
		e.bits, e.index = bits, indexMapping.Index(v)
	}
	return e.index
}

// Add records one value; degraded marks an event that was re-timed by
// processing time. bounds are the heatmap's bucket upper bounds. memo,
// when not nil, saves computing the sketch's index of values it has seen.
func (a *Acc) Add(v float64, degraded bool, bounds []float64, memo *IndexMemo) {
	if a.Count == 0 || v < a.Min {
		a.Min = v
	}
	if a.Count == 0 || v > a.Max {
		a.Max = v
	}
	if degraded {
		a.Degraded++
	}
	a.Buckets[bucketIndex(v, bounds)]++
	if a.sketch == nil && a.Count < fewValues {
		a.few[a.Count] = fewBin(v, memo)
		a.Count++
		return
	}
	// The value's bin, once, for the sketch and its highest values: what
	// the sketch's Add does with it (values beyond its range, |v| > ~1e307,
	// clamped; Min and Max stay exact).
	b := fewBin(v, memo)
	addBin(a.sketchOf(), b)
	a.addTop(a.topLen(), b)
	a.Count++
}

// bucketIndex returns the first bucket whose upper bound is >= v.
func bucketIndex(v float64, bounds []float64) int {
	if len(bounds) <= 16 {
		for i, le := range bounds {
			if v <= le {
				return i
			}
		}
		return len(bounds)
	}
	return sort.SearchFloat64s(bounds, v)
}

func clampForSketch(v float64) float64 {
	limit := maxIndexable
	switch {
	case v > limit:
		return limit
	case v < -limit:
		return -limit
	}
	return v
}

// Merge adds b's values into a.
func (a *Acc) Merge(b *Acc) {
	if b.Count == 0 {
		return
	}
	if a.Count == 0 || b.Min < a.Min {
		a.Min = b.Min
	}
	if a.Count == 0 || b.Max > a.Max {
		a.Max = b.Max
	}
	a.Degraded += b.Degraded
	for i, n := range b.Buckets {
		a.Buckets[i] += n
	}
	switch {
	case a.sketch == nil && b.sketch == nil && a.Count+b.Count <= fewValues:
		copy(a.few[a.Count:], b.few[:b.Count])
	case b.sketch == nil:
		s := a.sketchOf()
		for _, bin := range b.few[:b.Count] {
			addBin(s, bin)
			a.addTop(a.topLen(), bin)
			a.Count++
		}
		return
	default:
		_ = a.sketchOf().MergeWith(b.sketch) // same mapping everywhere: cannot fail
		// b's highest values' bins, or its noTop, which addTop takes as
		// a value that is not positive.
		n := a.topLen()
		for _, bin := range b.few[:b.topLen()] {
			a.addTop(n, bin)
			n = min(n+1, fewValues)
		}
	}
	a.Count += b.Count
}

// Clone returns a copy of a that later changes to a leave alone.
func (a *Acc) Clone() *Acc {
	c := *a
	c.Buckets = slices.Clone(a.Buckets)
	if a.sketch != nil {
		c.sketch = a.sketch.Copy()
	}
	return &c
}

// Reset empties a for reuse.
func (a *Acc) Reset() {
	a.Count, a.Min, a.Max, a.Degraded = 0, 0, 0, 0
	clear(a.Buckets)
	if a.sketch != nil {
		a.sketch.Clear()
	}
}

// Quantile returns the value at quantile q (0..1) within the sketch's
// relative accuracy, clamped to the exact [Min, Max]. It is 0 when empty.
func (a *Acc) Quantile(q float64) float64 {
	if a.Count == 0 {
		return 0
	}
	var v float64
	if a.sketch == nil {
		v = a.fewQuantile(q)
	} else if top, ok := a.topQuantile(q); ok {
		v = top
	} else {
		var err error
		if v, err = a.sketch.GetValueAtQuantile(q); err != nil {
			return 0
		}
	}
	return math.Min(math.Max(v, a.Min), a.Max)
}

// fewQuantile is the sketch's GetValueAtQuantile over a's few values, as
// if they were in a sketch.
func (a *Acc) fewQuantile(q float64) float64 {
	var pos, neg [fewValues]int
	np, nn, zero := 0, 0, 0
	for _, b := range a.few[:a.Count] {
		switch {
		case b > 0:
			pos[np] = int(b) - 1 + minIndex
			np++
		case b < 0:
			neg[nn] = int(-b) - 1 + minIndex
			nn++
		default:
			zero++
		}
	}
	slices.Sort(pos[:np])
	slices.Sort(neg[:nn])
	return keysQuantile(pos[:np], neg[:nn], zero, q)
}

// keysQuantile is the sketch's GetValueAtQuantile over values given by
// their keys, sorted (negative values by |v|), and the zeros: the bin of
// the rank's value, counting negative values, then the zero bin, then
// positive values.
func keysQuantile(pos, neg []int, zero int, q float64) float64 {
	key, sign := keyAtQuantile(pos, neg, zero, q)
	return float64(sign) * indexMapping.Value(key)
}

// keyAtQuantile is keysQuantile's bin: its key, and the sign of its values
// (0 for the zero bin, whose key means nothing).
func keyAtQuantile(pos, neg []int, zero int, q float64) (key, sign int) {
	rank := float64(q * float64(len(pos)+len(neg)+zero-1))
	negCount := float64(len(neg))
	switch {
	case rank < negCount:
		return keyAtRank(neg, negCount-1-rank), -1
	case rank < float64(zero)+negCount:
		return 0, 0
	}
	return keyAtRank(pos, rank-float64(zero)-negCount), 1
}

// BinSet is the values of several accumulators by their bins, kept in
// order as accumulators are added: its Quantile is what Quantile gives for
// their merge, without a sketch to fill. An accumulator that holds its
// values inline gives them all; one with a sketch gives the bins of its
// highest values (fewValues of them) and the count of the others, which
// is enough for a quantile among the merge's fewValues highest values.
// The zero value is empty.
type BinSet struct {
	pos, neg []int // keys, ascending: positive values', negative values' (of |v|)
	zero     int
	// hidden is how many positive values s counts but does not hold. Once
	// there are any, s holds the fewValues highest positive values of all
	// it counts, and only them: each accumulator gave its own highest.
	hidden int64
	lo, hi float64
	// values caches bins' values, which cost an exponential each: the
	// windows of one event mostly share their quantile's bin, and a
	// stream's values fall in a few hundred bins.
	values binValues
}

// binValues is a direct-mapped cache of bins' values, by key.
type binValues [256]struct {
	// key is the bin's key less minIndex, plus one: zero is empty.
	key   int32
	value float64
}

// of returns the value of key's bin.
func (c *binValues) of(key int) float64 {
	e := &c[uint(key)%uint(len(c))]
	if tag := int32(key - minIndex + 1); e.key != tag {
		e.key, e.value = tag, indexMapping.Value(key)
	}
	return e.value
}

// Reset empties s, keeping its space.
func (s *BinSet) Reset() { s.pos, s.neg, s.zero, s.hidden = s.pos[:0], s.neg[:0], 0, 0 }

// Len is how many values s counts.
func (s *BinSet) Len() int64 { return int64(len(s.pos)+len(s.neg)+s.zero) + s.hidden }

// Bins is how many bins a BinSet holds of a, and false when it cannot take
// a: a sketch with a value that is zero or negative, whose highest values'
// bins a does not keep.
func (a *Acc) Bins() (int, bool) {
	if a.sketch == nil {
		return int(a.Count), true
	}
	n := a.topLen()
	return n, n == 0 || a.few[0] != noTop
}

// Add adds a's values to s, and reports false, adding none, when s cannot
// take them (Bins).
func (s *BinSet) Add(a *Acc) bool {
	n, ok := a.Bins()
	if !ok {
		return false
	}
	if a.Count == 0 {
		return true
	}
	if s.Len() == 0 || a.Min < s.lo {
		s.lo = a.Min
	}
	if s.Len() == 0 || a.Max > s.hi {
		s.hi = a.Max
	}
	for _, b := range a.few[:n] {
		switch {
		case b > 0:
			s.addPositive(int(b) - 1 + minIndex)
		case b < 0:
			s.neg = insertSorted(s.neg, int(-b)-1+minIndex)
		default:
			s.zero++
		}
	}
	s.hidden += a.Count - int64(n)
	if k := len(s.pos) - fewValues; s.hidden > 0 && k > 0 {
		// Only the fewValues highest can be a quantile now.
		copy(s.pos, s.pos[k:])
		s.pos, s.hidden = s.pos[:fewValues], s.hidden+int64(k)
	}
	return true
}

// addPositive adds a positive value's key: held, or, once s hides values
// and it is no higher than the fewValues highest, counted among those
// hidden.
func (s *BinSet) addPositive(key int) {
	if s.hidden > 0 && len(s.pos) >= fewValues && key <= s.pos[len(s.pos)-fewValues] {
		s.hidden++
		return
	}
	s.pos = insertSorted(s.pos, key)
}

// TopQuantile reports whether quantile q of n values falls among their
// fewValues highest, which a BinSet holds of accumulators with a sketch.
func TopQuantile(q float64, n int64) bool { return fromTop(q, n) < fewValues }

// insertSorted inserts k into keys, ascending: by a step of insertion sort
// into a few keys, the most a cold key's windows hold, where a binary
// search and a move cost more than the shifts.
func insertSorted(keys []int, k int) []int {
	if len(keys) > 32 {
		i, _ := slices.BinarySearch(keys, k)
		return slices.Insert(keys, i, k)
	}
	keys = append(keys, k)
	i := len(keys) - 1
	for ; i > 0 && keys[i-1] > k; i-- {
		keys[i] = keys[i-1]
	}
	keys[i] = k
	return keys
}

// Quantile is Quantile of the merge of the accumulators added; ok is false
// when the quantile falls among values s does not hold. Of the merge's
// positive values, those s holds include the fewValues highest: each
// accumulator's values above the fewValues-th highest of the merge are
// fewValues at most, all of which it gave.
func (s *BinSet) Quantile(q float64) (v float64, ok bool) {
	if s.Len() == 0 {
		return 0, true
	}
	key, sign := 0, 1
	if s.hidden == 0 {
		key, sign = keyAtQuantile(s.pos, s.neg, s.zero, q)
	} else {
		// The quantile must be among the highest positive values, which
		// s holds: the values hidden are below them.
		if float64(q*float64(s.Len()-1)) < float64(len(s.neg)+s.zero) {
			return 0, false
		}
		i := fromTop(q, s.Len())
		if i >= fewValues {
			return 0, false
		}
		key = s.pos[int64(len(s.pos))-1-i]
	}
	return math.Min(math.Max(float64(sign)*s.values.of(key), s.lo), s.hi), true
}

// keyAtRank is a store's KeyAtRank over its keys, sorted, one per value:
// the key of the first value whose count with those before it exceeds
// rank.
func keyAtRank(keys []int, rank float64) int {
	i := 0
	if rank > 0 {
		i = int(rank)
	}
	return keys[min(i, len(keys)-1)]
}

// Sum estimates the sum of the values from the sketch: each value counts
// as its bin's representative, within the sketch's relative accuracy of
// it, so the sum of positive values is within RelativeAccuracy of the
// exact sum. The accumulator keeps no exact sum, which would change its
// stored encoding. It is 0 when empty.
func (a *Acc) Sum() float64 {
	if a.Count == 0 {
		return 0
	}
	if a.sketch == nil {
		s := fewSketches.Get().(*ddsketch.DDSketch)
		defer fewSketches.Put(s)
		return a.fewSketch(s).GetSum()
	}
	return a.sketch.GetSum()
}

// fewSketches are sketches to sum few values in.
var fewSketches = sync.Pool{New: func() any { return newSketch() }}

// fewSketch returns s, cleared, holding a's few values.
func (a *Acc) fewSketch(s *ddsketch.DDSketch) *ddsketch.DDSketch {
	s.Clear()
	for _, b := range a.few[:a.Count] {
		addBin(s, b)
	}
	return s
}

// AppendBinary appends a's encoding to dst, for the state store.
func (a *Acc) AppendBinary(dst []byte) []byte {
	dst = binary.AppendVarint(dst, a.Count)
	dst = binary.LittleEndian.AppendUint64(dst, math.Float64bits(a.Min))
	dst = binary.LittleEndian.AppendUint64(dst, math.Float64bits(a.Max))
	dst = binary.AppendVarint(dst, a.Degraded)
	dst = binary.AppendUvarint(dst, uint64(len(a.Buckets)))
	for _, n := range a.Buckets {
		dst = binary.AppendVarint(dst, n)
	}
	if a.sketch == nil {
		// No sketch (a sketch's encoding is never empty): the values' bins.
		dst = binary.AppendUvarint(dst, 0)
		for _, b := range a.few[:a.Count] {
			dst = binary.AppendVarint(dst, int64(b))
		}
		return dst
	}
	var sk []byte
	a.sketch.Encode(&sk, true)
	dst = binary.AppendUvarint(dst, uint64(len(sk)))
	return append(dst, sk...)
}

// errCorrupt reports an encoding that cannot be decoded.
var errCorrupt = corrupt.Errorf("heatmap: corrupt encoding")

// Skip returns what follows the accumulator AppendBinary encoded at the start
// of b, reading only its lengths: a state whose sketch is not needed (a
// purge) is not decoded.
func Skip(b []byte) ([]byte, error) {
	count, b, ok := varint(b)
	if !ok || len(b) < 16 || count < 0 {
		return nil, errCorrupt
	}
	if _, b, ok = varint(b[16:]); !ok {
		return nil, errCorrupt
	}
	n, b, ok := uvarint(b)
	if !ok || n > uint64(len(b)) {
		return nil, errCorrupt
	}
	for range n {
		if _, b, ok = varint(b); !ok {
			return nil, errCorrupt
		}
	}
	skLen, b, ok := uvarint(b)
	if !ok || skLen > uint64(len(b)) {
		return nil, errCorrupt
	}
	if skLen == 0 { // the few values' bins instead
		if count > fewValues {
			return nil, errCorrupt
		}
		for range count {
			if _, b, ok = varint(b); !ok {
				return nil, errCorrupt
			}
		}
		return b, nil
	}
	return b[skLen:], nil
}

// Decode reads an accumulator written by AppendBinary from b and returns the
// rest of b.
func Decode(b []byte) (*Acc, []byte, error) {
	a := &Acc{}
	var ok bool
	if a.Count, b, ok = varint(b); !ok {
		return nil, nil, errCorrupt
	}
	if len(b) < 16 {
		return nil, nil, errCorrupt
	}
	a.Min = math.Float64frombits(binary.LittleEndian.Uint64(b))
	a.Max = math.Float64frombits(binary.LittleEndian.Uint64(b[8:]))
	b = b[16:]
	if a.Degraded, b, ok = varint(b); !ok {
		return nil, nil, errCorrupt
	}
	n, b, ok := uvarint(b)
	if !ok || n > uint64(len(b)) {
		return nil, nil, errCorrupt
	}
	a.Buckets = make([]int64, n)
	for i := range a.Buckets {
		if a.Buckets[i], b, ok = varint(b); !ok {
			return nil, nil, errCorrupt
		}
	}
	skLen, b, ok := uvarint(b)
	if !ok || skLen > uint64(len(b)) {
		return nil, nil, errCorrupt
	}
	if skLen == 0 { // the few values' bins
		if a.Count < 0 || a.Count > fewValues {
			return nil, nil, errCorrupt
		}
		for i := range a.Count {
			v, rest, ok := varint(b)
			if span := int64(maxIndex - minIndex + 1); !ok || v > span || v < -span {
				return nil, nil, errCorrupt
			}
			a.few[i], b = int32(v), rest
		}
		return a, b, nil
	}
	// Decoded sparse first: a corrupt sketch may name bins far outside the
	// mapping's range, and a dense store allocates every bin up to them.
	sk, err := ddsketch.DecodeDDSketch(b[:skLen], store.SparseStoreConstructor, indexMapping)
	if err != nil {
		return nil, nil, fmt.Errorf("heatmap: decode sketch: %w", err)
	}
	for _, st := range []store.Store{sk.GetPositiveValueStore(), sk.GetNegativeValueStore()} {
		if st.IsEmpty() {
			continue
		}
		lo, _ := st.MinIndex()
		hi, _ := st.MaxIndex()
		if lo < minIndex || hi > maxIndex {
			return nil, nil, errCorrupt
		}
	}
	if a.Count <= fewValues && int64(sk.GetCount()) == a.Count {
		// Few values, as an older encoding may hold them: their bins.
		i := 0
		sk.GetNegativeValueStore().ForEach(func(index int, count float64) bool {
			for range int(count) {
				a.few[i], i = -int32(index-minIndex+1), i+1
			}
			return false
		})
		i += int(sk.GetZeroCount()) // a.few[i] is 0 already
		sk.GetPositiveValueStore().ForEach(func(index int, count float64) bool {
			for range int(count) {
				a.few[i], i = int32(index-minIndex+1), i+1
			}
			return false
		})
		return a, b[skLen:], nil
	}
	a.sketch = newSketch()
	_ = a.sketch.MergeWith(sk) // same mapping: cannot fail
	a.rebuildTop()
	return a, b[skLen:], nil
}

// minIndexable and maxIndexable bound the values the sketch indexes
// itself; minIndex and maxIndex bound the bins of a valid sketch.
var (
	minIndexable = indexMapping.MinIndexableValue()
	maxIndexable = indexMapping.MaxIndexableValue()
	minIndex     = indexMapping.Index(minIndexable)
	maxIndex     = indexMapping.Index(maxIndexable)
)

func varint(b []byte) (int64, []byte, bool) {
	v, n := binary.Varint(b)
	if n <= 0 {
		return 0, nil, false
	}
	return v, b[n:], true
}

func uvarint(b []byte) (uint64, []byte, bool) {
	v, n := binary.Uvarint(b)
	if n <= 0 {
		return 0, nil, false
	}
	return v, b[n:], true
}

// Screen answers, from counts that add up over panes, whether a window's
// quantile can exceed a threshold: a quantile rule asks that of every window
// an event falls in, and merging the panes' sketches for each window to
// compute it exactly costs their bins each time. Values that Below reports
// for lie below the threshold's bin; MayExceed then rules a window out from
// how many of its values those are, so that only the windows it leaves in
// need their sketches merged. The zero value screens nothing out.
type Screen struct {
	threshold float64
	// key is the lowest sketch index whose values may exceed the
	// threshold: an index below it holds values below the threshold only.
	key int
}

// NewScreen returns the screen for a threshold of at least 0.
func NewScreen(threshold float64) Screen {
	s := Screen{threshold: threshold, key: minIndex}
	if threshold <= minIndexable {
		return s // every positive value may exceed it
	}
	// The highest index whose value (the quantile a sketch reports when
	// the rank falls in its bin) is at most the threshold: its bin and
	// those above it may exceed the threshold, through the value or
	// through the exact minimum that Quantile clamps to.
	k := indexMapping.Index(math.Min(threshold, maxIndexable))
	for k > minIndex && indexMapping.Value(k) > threshold {
		k--
	}
	for k < maxIndex && indexMapping.Value(k+1) <= threshold {
		k++
	}
	s.key = k
	return s
}

// Below reports whether v is a value below the threshold's bin, memo as in
// Add. A quantile whose rank falls on such a value is at most the
// threshold, and a window all of whose values are above the threshold has
// none.
func (s Screen) Below(v float64, memo *IndexMemo) bool {
	return s.binBelow(fewBin(v, memo))
}

// binBelow is Below for a value in bin b, as fewBin returns it: a negative
// value's, the zero bin when the threshold is above the zero bin's values,
// or a positive index below the screen's key.
func (s Screen) binBelow(b int32) bool {
	switch {
	case b < 0:
		return true
	case b == 0:
		return s.threshold >= minIndexable
	}
	return int(b)-1+minIndex < s.key
}

// CountBelow returns how many of a's values Below reports for: what a
// pane's count of them is rebuilt from.
func (a *Acc) CountBelow(s Screen) int64 {
	if a == nil || a.Count == 0 {
		return 0
	}
	if a.sketch == nil {
		n := int64(0)
		for _, b := range a.few[:a.Count] {
			if s.binBelow(b) {
				n++
			}
		}
		return n
	}
	n := a.sketch.GetNegativeValueStore().TotalCount()
	if s.threshold >= minIndexable {
		n += a.sketch.GetZeroCount()
	}
	a.sketch.GetPositiveValueStore().ForEach(func(index int, count float64) bool {
		if index >= s.key {
			return true
		}
		n += count
		return false
	})
	return int64(n)
}

// MayExceed reports whether the q quantile of a window of n values, below
// of which Below reports for, may exceed the screen's threshold; when it
// returns false, Quantile of the window's merged sketch is at most the
// threshold. The rank is the sketch's, with half a value of slack for its
// rounding.
//
// Why: Quantile is the value of the bin k at the rank, clamped to the
// exact [Min, Max]. If it exceeds the threshold, either that value does,
// so k is above the screen's key and every value Below reports for lies
// in the zero bin, a negative one or a bin below k, all counted before
// the rank, so below <= rank; or Min does, so no value is below the
// threshold and below is 0.
func MayExceed(q float64, n, below int64) bool {
	if n == 0 {
		return false
	}
	rank := float64(q * float64(n-1))
	return float64(below) <= rank+0.5
}

// Bin is one bin of a sketch: its key (index) and how many values it holds.
type Bin struct {
	Key   int
	Count float64
}

// PositiveBins appends a's bins to dst in ascending key order, and reports
// whether they are all of a's values: false when a holds a zero or a
// negative value, which the sketch keeps apart. Its answer depends only on
// a's values, as Quantile's does.
func (a *Acc) PositiveBins(dst []Bin) ([]Bin, bool) {
	if a.sketch == nil {
		start := len(dst)
		for _, b := range a.few[:a.Count] {
			if b <= 0 {
				return dst[:start], false
			}
			dst = append(dst, Bin{int(b) - 1 + minIndex, 1})
		}
		bins := dst[start:]
		slices.SortFunc(bins, func(x, y Bin) int { return x.Key - y.Key })
		// One bin per key, with its count.
		out := start
		for i, b := range bins {
			if i > 0 && b.Key == dst[out-1].Key {
				dst[out-1].Count++
				continue
			}
			dst[out] = b
			out++
		}
		return dst[:out], true
	}
	if a.sketch.GetZeroCount() != 0 || !a.sketch.GetNegativeValueStore().IsEmpty() {
		return dst, false
	}
	a.sketch.GetPositiveValueStore().ForEach(func(key int, count float64) bool {
		dst = append(dst, Bin{key, count})
		return false
	})
	return dst, true
}

// PositiveKey returns the key of the bin Add puts v in (memo as in Add),
// false for a value the positive bins do not hold (zero or negative).
func PositiveKey(v float64, memo *IndexMemo) (int, bool) {
	if v = clampForSketch(v); v <= minIndexable {
		return 0, false
	}
	if memo != nil {
		return memo.index(v), true
	}
	return indexMapping.Index(v), true
}

// BinValue is the value Quantile gives for a rank that falls in the bin of
// key, before it is clamped to the values' range.
func BinValue(key int) float64 { return indexMapping.Value(key) }
