// Package slot is the state the window operator keeps per (rule or
// heatmap, key): a rule compiled against the event schema (Spec), its
// panes or sessions with their aggregates (Slot, Win, Acc), distinct
// values indexed over panes (DistinctIndex), the encoding a slot is stored
// in (Encode, DecodeInto; docs/format/state.md), the keys of slots and of
// their timers, and the window arithmetic they share.
//
// It holds data and the rules that keep it consistent, not the operator's
// decisions: package windows assigns events to a slot's windows, fires
// and decides, and package slotstore keeps slots in memory or the Backend.
package slot
