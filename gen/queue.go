package gen

// deliveryQueue is a min-heap of records in delivery order: by ingest time,
// then by generation order. It holds only records that some future record
// could still precede, so its size is about Rate × (Jitter + Batching).
type deliveryQueue []record

// before reports whether a is delivered before b.
func before(a, b *record) bool {
	if a.ingestMs != b.ingestMs {
		return a.ingestMs < b.ingestMs
	}
	return a.seq < b.seq
}

// The sifts move a hole rather than swapping, since records are wide and
// this is the generator's hottest loop.

func (q *deliveryQueue) push(r record) {
	*q = append(*q, r)
	h := *q
	i := len(h) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !before(&r, &h[p]) {
			break
		}
		h[i] = h[p]
		i = p
	}
	h[i] = r
}

// pop removes the first record to deliver into *r.
func (q *deliveryQueue) pop(r *record) {
	h := *q
	n := len(h) - 1
	*r = h[0]
	last := h[n]
	h = h[:n]
	i := 0
	for {
		c := 2*i + 1
		if c >= n {
			break
		}
		if c+1 < n && before(&h[c+1], &h[c]) {
			c++
		}
		if !before(&h[c], &last) {
			break
		}
		h[i] = h[c]
		i = c
	}
	if n > 0 {
		h[i] = last
	}
	*q = h
}
