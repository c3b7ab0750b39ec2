package heartbeat

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/bus/bridge"
	"github.com/switchboard-chat/switchboard/bus/natsbus"
	"github.com/switchboard-chat/switchboard/internal/cli"
)

// Daemon is what `switchboard heartbeat now` needs of the configuration:
// the agents' heartbeats and how an operator reaches the daemon's bus.
type Daemon struct {
	Agents   []Agent
	Operator natsbus.Operator
	// Bus is the bus section (subject prefix, text limit).
	Bus natsbus.Config
}

// RunVerb is `switchboard heartbeat now AGENT [--config F] [--url U]
// [--wait D]`: it publishes a heartbeat trigger of AGENT on the running
// daemon's bus as the operator (a fresh id, de-duplicated like a slot's)
// and waits up to --wait for the outcome event, which it prints. --config
// and the other flags may come before or after the positional arguments.
// load reads the configuration at path ("" for the default) and the bus
// URL (busURL, "" for the configuration's operator credentials).
func RunVerb(ctx context.Context, args []string, stdout, stderr io.Writer, load func(path, busURL string) (Daemon, error)) error {
	words, flags := split(args)
	if len(words) == 0 && cli.WantsHelp(args) {
		cli.Help(stderr, nil, "heartbeat")
		return nil
	}
	fs := flag.NewFlagSet("heartbeat now", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "", "configuration file (default ./config.yaml when it exists, else the built-in defaults)")
	busURL := natsbus.URLFlag(fs)
	wait := fs.Duration("wait", 2*time.Minute, "how long to wait for the turn's outcome (0: do not wait)")
	if err := cli.Parse(fs, flags); err != nil {
		return err
	}
	if len(words) == 0 || words[0] != "now" {
		return fmt.Errorf("%w: heartbeat: want the subcommand now (switchboard heartbeat now AGENT)", cli.ErrUsage)
	}
	if len(words) != 2 {
		return fmt.Errorf("%w: heartbeat now: want one agent name", cli.ErrUsage)
	}
	name := words[1]
	d, err := load(*path, *busURL)
	if err != nil {
		return err
	}
	var c Config
	var names []string
	found := false
	for _, a := range d.Agents {
		names = append(names, a.Name)
		if a.Name == name {
			c, found = a.Config, true
		}
	}
	switch {
	case !found:
		return fmt.Errorf("heartbeat now: no agent %q (agents: %s)", name, strings.Join(names, ", "))
	case c.To.IsZero():
		return fmt.Errorf("heartbeat now: agents.%s.heartbeat.to is not set: the turn would have no chat to speak to", name)
	}
	op := d.Operator
	cl, err := bridge.Dial(ctx, op.URL, bridge.Credentials{Token: op.Token, User: op.User, Password: op.Password},
		bridge.Options{Channel: Channel, SubjectPrefix: d.Bus.SubjectPrefix, MaxTextBytes: d.Bus.MaxTextBytes})
	if err != nil {
		return fmt.Errorf("heartbeat now: %w", err)
	}
	defer cl.Close()
	now := time.Now()
	id := fmt.Sprintf("hb:%s:now-%d", name, now.UnixNano())
	events := make(chan bus.Event, 16)
	if *wait > 0 {
		sub, err := cl.Conn().Subscribe(cl.Subjects().Event(Channel, name), func(m *nats.Msg) {
			var ev bus.Event
			if json.Unmarshal(m.Data, &ev) == nil && ev.Type == bus.EventHeartbeat && ev.InReplyTo == id {
				select {
				case events <- ev:
				default:
				}
			}
		})
		if err != nil {
			return fmt.Errorf("heartbeat now: %w", err)
		}
		defer func() { _ = sub.Unsubscribe() }()
		if err := cl.Conn().Flush(); err != nil {
			return fmt.Errorf("heartbeat now: %w", err)
		}
	}
	if err := cl.PublishInbound(ctx, Trigger(name, id, c.prompt(), now)); err != nil {
		return fmt.Errorf("heartbeat now: %w", err)
	}
	fmt.Fprintf(stdout, "heartbeat of %s triggered (id %s, to %s)\n", name, id, c.To)
	if *wait <= 0 {
		return nil
	}
	timer := time.NewTimer(*wait)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-timer.C:
			return fmt.Errorf("heartbeat now: no outcome within %s (is the daemon running? its log says more)", *wait)
		case ev := <-events:
			var data struct{ Outcome, To string }
			_ = json.Unmarshal(ev.Data, &data)
			switch data.Outcome {
			case OutcomeSent:
				fmt.Fprintf(stdout, "sent to %s\n", data.To)
				return nil
			case OutcomeSilent:
				fmt.Fprintf(stdout, "nothing to say (%s): nothing sent\n", SilentToken)
				return nil
			case OutcomeFailed, OutcomeNoTarget:
				return errors.New("heartbeat now: " + data.Outcome + " (the daemon's log says why)")
			}
		}
	}
}

// split separates the positional words of args from the flags (and their
// values), so that flags may come anywhere.
func split(args []string) (words, flags []string) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			words = append(words, args[i+1:]...)
			break
		}
		if !strings.HasPrefix(a, "-") {
			words = append(words, a)
			continue
		}
		flags = append(flags, a)
		name := strings.TrimLeft(a, "-")
		if !strings.Contains(name, "=") && (name == "config" || name == "url" || name == "wait") && i+1 < len(args) {
			i++
			flags = append(flags, args[i])
		}
	}
	return words, flags
}
