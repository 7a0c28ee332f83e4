package windows

// timer asks for a slot's onTimer at time at.
type timer struct {
	at  int64
	seq uint64
	key string
}

// timerQueue is the operator's single ordered timer structure (Flink's
// InternalTimerService): a min-heap on (at, seq). seq keeps the order of
// timers due at the same time deterministic: the order they were set in.
type timerQueue struct {
	h   []timer
	seq uint64
}

func (q *timerQueue) Len() int { return len(q.h) }

func (q *timerQueue) peek() *timer { return &q.h[0] }

func (q *timerQueue) less(i, j int) bool {
	a, b := &q.h[i], &q.h[j]
	return a.at < b.at || (a.at == b.at && a.seq < b.seq)
}

func (q *timerQueue) push(at int64, key string) {
	q.seq++
	q.h = append(q.h, timer{at: at, seq: q.seq, key: key})
	for i := len(q.h) - 1; i > 0; {
		parent := (i - 1) / 2
		if !q.less(i, parent) {
			break
		}
		q.h[i], q.h[parent] = q.h[parent], q.h[i]
		i = parent
	}
}

func (q *timerQueue) pop() timer {
	top := q.h[0]
	last := len(q.h) - 1
	q.h[0] = q.h[last]
	q.h[last] = timer{}
	q.h = q.h[:last]
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < len(q.h) && q.less(l, m) {
			m = l
		}
		if r < len(q.h) && q.less(r, m) {
			m = r
		}
		if m == i {
			break
		}
		q.h[i], q.h[m] = q.h[m], q.h[i]
		i = m
	}
	return top
}
