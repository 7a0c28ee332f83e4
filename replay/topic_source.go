package replay

import (
	"context"
	"errors"
	"log/slog"
	"math"

	"github.com/riskstream/riskstream/kafkaconn"
	"github.com/riskstream/riskstream/kafkaio"
	"github.com/riskstream/riskstream/order"
	"github.com/segmentio/kafka-go"
)

// readTopicRanges reads the ranges of a topic through the merge the live job
// uses (order.Merger), in chunks of records of about size bytes sent on
// out; it closes out when every range is read. The merge never times out:
// a replay waits for every partition, so its order depends on the topic
// alone.
func readTopicRanges(ctx context.Context, brokers []string, sec *kafkaconn.Security, topic string, ranges []kafkaio.TopicRange, size int, out chan<- *chunk, free chan *chunk, log *slog.Logger) {
	defer close(out)
	fail := func(err error) {
		select {
		case out <- &chunk{file: "topic " + topic, err: err}:
		case <-ctx.Done():
		}
	}
	merge, err := order.New(order.Options[kafka.Message]{
		Timestamp: kafkaio.MessageTime, Wait: math.MaxInt64 / 4, BehindWait: math.MaxInt64 / 4, Release: kafkaio.Recycle,
	})
	if err != nil {
		fail(err)
		return
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	fetchedCh := make(chan kafkaio.Fetch, 16)
	open := 0
	for _, r := range ranges {
		if r.From >= r.End {
			continue
		}
		merge.AddPartition(r.Partition)
		f := kafkaio.NewFetcher(brokers, sec.Dialer(), topic, int(r.Partition), r.From, r.End, fetchedCh, log, nil)
		go f.Run(ctx)
		open++
	}
	c := newChunk(free, 0, "topic "+topic, 0)
	bytes := 0
	send := func() bool {
		select {
		case out <- c:
		case <-ctx.Done():
			return false
		}
		c, bytes = newChunk(free, 0, "topic "+topic, 0), 0
		return true
	}
	for open > 0 {
		var f kafkaio.Fetch
		select {
		case f = <-fetchedCh:
		case <-ctx.Done():
			return
		}
		if f.Done {
			merge.Done(f.Partition)
			open--
		} else {
			merge.Push(f.Partition, f.Msgs, true, 0)
		}
		for {
			m, p, ok := merge.Pop(0)
			if !ok {
				break
			}
			c.recs = append(c.recs, kafkaio.Record(&m, p))
			if bytes += len(m.Value); bytes >= size && !send() {
				return
			}
		}
	}
	if len(c.recs) > 0 {
		send()
	}
	if merge.Len() > 0 {
		fail(errors.New("records left in the merge after every partition ended"))
	}
}
