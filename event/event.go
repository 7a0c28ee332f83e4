// Package event decodes one JSON request event into the few fields the rules
// need, without reflection and without allocating on the common path.
//
// A Schema lists the attributes the rules and heatmaps use and how (as a key or
// filter scalar, or as a number). A Decoder scans a record once, validates that
// it is JSON, and fills an Event whose values are views into the record's bytes
// (or into the Decoder's scratch space for strings that needed unescaping).
// The Event is valid until the next call to Decode with the same Decoder.
package event

// Kind is the JSON type of an attribute value.
type Kind uint8

const (
	// Missing means the attribute is absent (or null).
	Missing Kind = iota
	// String is a JSON string.
	String
	// Number is a JSON number.
	Number
	// Bool is true or false.
	Bool
)

// Value is one attribute of an event.
type Value struct {
	Kind Kind
	// Text is the canonical JSON text of the value: for a String, the quoted
	// string with only `"`, `\` and control characters escaped (and invalid
	// UTF-8 replaced by U+FFFD); for a Number, its text as written; for a
	// Bool, `true` or `false`. Equal values have equal Text, except numbers
	// written differently (1 and 1.0), which keys tell apart (docs/events.md
	// "Attributes": keyed by their JSON text) and filters compare by Num.
	Text []byte
	// Num is the value of a Number.
	Num float64
}

// Use says how the rules use an attribute, and so which types are valid.
type Use uint8

const (
	// UseScalar is a key, filter or distinct field: a string, number or
	// boolean. An object or array is invalid.
	UseScalar Use = iota
	// UseNumber is an aggregated or measured field: a number. Anything else
	// present (string, bool, object, array) is invalid.
	UseNumber
)

// Field is an attribute the schema extracts.
type Field struct {
	Name string
	Use  Use
}

// Event is a decoded record.
type Event struct {
	// ID is the request id as canonical JSON string text (with quotes).
	ID []byte
	// TS is the event time in epoch milliseconds.
	TS int64
	// IngestTS is the record's captured Kafka timestamp (files only), valid
	// when HasIngestTS.
	IngestTS    int64
	HasIngestTS bool
	// Source is the unquoted source name, empty when absent.
	Source []byte
	// Attrs holds the schema's fields, in schema order.
	Attrs []Value
}

// MinTS and MaxTS bound valid event times (about ±285,000 years) so that
// window arithmetic (start + size, end - 1 + lateness) cannot overflow.
const (
	MinTS = -(int64(1) << 53)
	MaxTS = int64(1) << 53
)

// Provenance says where an input record came from: a file and line in
// replay of files, a topic's partition and offset live and in replay of a
// topic. Late and dlq records carry it, and decisions that of their event
// when it came from a topic.
type Provenance struct {
	File string
	Line int64
	// Topic is set for a record read from Kafka.
	Topic     string
	Partition int32
	Offset    int64
}

// Error is why a record is invalid; it goes to the dlq output as the reason.
type Error struct {
	Reason string
}

func (e *Error) Error() string { return e.Reason }
