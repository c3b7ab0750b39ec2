package bus

import (
	"errors"
	"testing"
)

// TestSpeaker: the identity of an inbound envelope, its session key (the
// same as the envelope's, for every member of the chat) and what acting
// for a member needs.
func TestSpeaker(t *testing.T) {
	in := Inbound{Channel: "slack", ChatID: "C1", ThreadID: "17.5", UserID: "U1", UserName: "Ann", IsGroup: true}
	s := in.Speaker()
	if want := (Speaker{Channel: "slack", ChatID: "C1", ThreadID: "17.5", UserID: "U1", IsGroup: true}); s != want {
		t.Fatalf("Speaker() = %+v, want %+v", s, want)
	}
	if s.SessionKey() != "slack/C1/17.5" || s.SessionKey() != in.SessionKey() {
		t.Errorf("SessionKey = %q, envelope's %q", s.SessionKey(), in.SessionKey())
	}
	other := s
	other.UserID = "U2"
	if other.SessionKey() != s.SessionKey() {
		t.Errorf("two members of one chat have different sessions: %q, %q", other.SessionKey(), s.SessionKey())
	}
	if got := (Speaker{Channel: "telegram", ChatID: "42"}).SessionKey(); got != "telegram/42" {
		t.Errorf("SessionKey without thread = %q", got)
	}
	if err := s.Validate(); err != nil {
		t.Errorf("Validate(%+v) = %v", s, err)
	}
	for _, tt := range []struct {
		s    Speaker
		want string
	}{
		{Speaker{}, "incomplete speaker: channel is empty"},
		{Speaker{Channel: "telegram", ChatID: "1"}, "incomplete speaker: user id is empty"},
		{Speaker{Channel: "telegram", UserID: "1", IsGroup: true}, "incomplete speaker: chat id is empty in a group"},
	} {
		err := tt.s.Validate()
		if !errors.Is(err, ErrIncompleteSpeaker) || err.Error() != tt.want {
			t.Errorf("Validate(%+v) = %v, want %q", tt.s, err, tt.want)
		}
	}
	if err := (Speaker{Channel: "telegram", UserID: "1"}).Validate(); err != nil {
		t.Errorf("a private chat needs no chat id: %v", err)
	}
}
