package job

// arrivals remembers, per input partition, when each fetch whose
// records the merge still holds arrived, by its last offset: the record
// the merge gives at an offset came with the first fetch that reaches it.
type arrivals struct {
	byPartition [][]fetchArrival // by partition number
}

type fetchArrival struct {
	last int64 // the offset of the fetch's last record
	at   int64 // Unix ns
}

// fetched notes a fetch of partition p up to offset last, arrived at at.
func (a *arrivals) fetched(p int32, last, at int64) {
	for int(p) >= len(a.byPartition) {
		a.byPartition = append(a.byPartition, nil)
	}
	a.byPartition[p] = append(a.byPartition[p], fetchArrival{last, at})
}

// of returns when the fetch of partition p's record at offset arrived, 0
// when not known, and forgets the fetches before it.
func (a *arrivals) of(p int32, offset int64) int64 {
	if int(p) >= len(a.byPartition) {
		return 0
	}
	q := a.byPartition[p]
	i := 0
	for i < len(q) && q[i].last < offset {
		i++
	}
	if i > 0 {
		q = append(q[:0], q[i:]...)
		a.byPartition[p] = q
	}
	if len(q) == 0 {
		return 0
	}
	return q[0].at
}
