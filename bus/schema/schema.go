// Package schema ships the JSON Schemas (draft 2020-12) of the bus protocol
// v1 envelopes, for bridge authors who validate what they publish or
// receive in any language: inbound.v1.json ([bus.ParseInbound]) and
// outbound.v1.json ([bus.Outbound.Validate]). The schema tests check that
// the schemas and the Go validation agree on every example under testdata.
//
// Besides standard keywords the schemas use one keyword of their own,
// maxBytes: the largest length of a string's UTF-8 form in bytes (for the
// meta object: of all keys and values together), which is how the runtime
// measures. Validators that do not know it ignore it and still check
// maxLength, which counts characters.
//
// The files are embedded in [Files]; the package has no other state.
package schema

import "embed"

// File names in [Files].
const (
	InboundFile  = "inbound.v1.json"
	OutboundFile = "outbound.v1.json"
)

// Files holds the schema files, read-only.
//
//go:embed inbound.v1.json outbound.v1.json
var Files embed.FS
