package llm

// Unexported parts of Probe, for the tests of package llm_test.
var (
	ProbeCall = probeCall
	BodyHint  = bodyHint
)
