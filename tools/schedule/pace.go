package schedule

import (
	"math"
	"time"

	"golang.org/x/time/rate"
)

// Pace bounds how fast scheduled runs are published on each channel it
// paces, across every scheduler given it (the daemon gives one to each
// agent's): a token bucket per channel, holding one second's worth (at
// least 1), as the bus's ingress limits a bridge's channels. A run over
// it is deferred, not dropped: it stays due and is published as soon as
// its channel's bucket allows, oldest due time first. A channel Pace was
// not given is not paced. A nil *Pace paces nothing. It is safe for
// concurrent use.
type Pace struct {
	lims map[string]*rate.Limiter // by channel; read-only after NewPace
}

// NewPace paces each channel of perSec to its runs per second; a rate of
// 0 or less leaves the channel unpaced.
func NewPace(perSec map[string]float64) *Pace {
	p := &Pace{lims: make(map[string]*rate.Limiter, len(perSec))}
	for ch, r := range perSec {
		if r > 0 {
			p.lims[ch] = rate.NewLimiter(rate.Limit(r), max(1, int(math.Ceil(r))))
		}
	}
	return p
}

// take spends one run of channel at now. When the bucket is empty it
// spends nothing, returns false and the time one run is allowed again.
func (p *Pace) take(channel string, now time.Time) (bool, time.Time) {
	if p == nil {
		return true, time.Time{}
	}
	lim := p.lims[channel]
	if lim == nil || lim.AllowN(now, 1) {
		return true, time.Time{}
	}
	short := 1 - lim.TokensAt(now)
	wait := time.Duration(math.Ceil(short / float64(lim.Limit()) * float64(time.Second)))
	return false, now.Add(max(wait, time.Millisecond))
}
