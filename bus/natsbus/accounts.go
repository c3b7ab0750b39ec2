package natsbus

import (
	"fmt"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/switchboard-chat/switchboard/bus"
)

// BridgeAccount returns the name of the NATS account of the embedded
// server in which the bridge named bridge lives: "BRIDGE_<name>". The
// daemon, the in-tree adapters and the operators live in the global
// account, which holds JetStream.
func BridgeAccount(bridge string) string { return "BRIDGE_" + bridge }

// IngressSubject returns the daemon-account subject on which an inbound
// message a bridge published on "<p>.in.<rest>" arrives:
// "<p>.ingress.<bridge>.<rest>". No stream captures it; the ingress
// ([Bus] in embedded mode) validates the message, applies its channel's
// rate limit and stores it on "<p>.in.<rest>" with a de-duplication key of
// its own channel. With an external server an operator maps each bridge's
// inbound subjects to it (docs/bridges.md).
func IngressSubject(prefix, bridge, rest string) string {
	return prefix + ".ingress." + bridge + "." + rest
}

// BridgeAPISubject returns the daemon-account subject on which the ingress
// answers a JetStream API request of the bridge named bridge:
// "<p>.ingress-api.<bridge>.<rest>", with rest "consumer.<channel>.>" for
// a request to (re)create its durable consumer and "info" for the
// JetStream account info. No stream captures it, and no channel name can
// make an [IngressSubject] equal to it. With an external server an
// operator maps the bridge's requests to it (docs/bridges.md).
func BridgeAPISubject(prefix, bridge, rest string) string {
	return prefix + ".ingress-api." + bridge + "." + rest
}

// bridgeImport is one subject the daemon account gives a bridge account.
type bridgeImport struct {
	from, to string                 // subject in the bridge account, subject in the daemon account
	stream   bool                   // stream import (the bridge receives); else service import (it requests)
	resp     server.ServiceRespType // response type of a service import
}

// bridgeImports lists every subject of the daemon account a bridge may
// reach, speaking for channels on a bus with prefix p:
//
// service imports (the bridge publishes or requests; every reply is routed
// back through the server into the bridge's account, whatever reply subject
// the bridge gave):
//
//	<p>.in.<channel>.>  ->  <p>.ingress.<bridge>.<channel>.>   its inbound messages, to the ingress
//	$JS.API.CONSUMER.CREATE.<OUT>.bridge_<name>.<p>.out.<channel>.>
//	                    ->  <p>.ingress-api.<bridge>.consumer.<channel>.>
//	                                                     (re)create its consumer: the ingress allows
//	                                                     only the daemon's settings ([BridgeConsumerConfig])
//	$JS.API.INFO        ->  <p>.ingress-api.<bridge>.info   JetStream account info, of the bridge's
//	                                                     own view (the ingress answers it)
//	$JS.API.CONSUMER.INFO.<OUT>.bridge_<name>            look up its durable consumer
//	$JS.API.CONSUMER.MSG.NEXT.<OUT>.bridge_<name>        pull from it (streamed replies)
//	$JS.ACK.<OUT>.bridge_<name>.>                        acknowledge what it pulled
//
// stream imports (the bridge subscribes):
//
//	<p>.out.<channel>.>, <p>.event.<channel>.>, <p>.dlq.<channel>
//
// Nothing else of the daemon account exists in a bridge's account: not the
// other channels' subjects, not the daemon's inboxes, not the rest of the
// JetStream API.
func bridgeImports(prefix, bridge string, channels []string) []bridgeImport {
	subj := bus.Subjects{Prefix: prefix}
	out := StreamsFor(prefix).Out
	cons := BridgeConsumerName(bridge)
	api := func(s string, rt server.ServiceRespType) bridgeImport {
		return bridgeImport{from: s, to: s, resp: rt}
	}
	var imps []bridgeImport
	for _, ch := range channels {
		imps = append(imps,
			bridgeImport{from: prefix + ".in." + ch + ".>", to: IngressSubject(prefix, bridge, ch+".>"), resp: server.Singleton},
			bridgeImport{from: "$JS.API.CONSUMER.CREATE." + out + "." + cons + "." + subj.OutChannel(ch),
				to: BridgeAPISubject(prefix, bridge, consumerAPIToken+"."+ch+".>"), resp: server.Singleton},
			bridgeImport{from: subj.OutChannel(ch), to: subj.OutChannel(ch), stream: true},
			bridgeImport{from: prefix + ".event." + ch + ".>", to: prefix + ".event." + ch + ".>", stream: true},
			bridgeImport{from: subj.DLQ(ch), to: subj.DLQ(ch), stream: true},
		)
	}
	return append(imps,
		bridgeImport{from: "$JS.API.INFO", to: BridgeAPISubject(prefix, bridge, infoAPIToken), resp: server.Singleton},
		api("$JS.API.CONSUMER.INFO."+out+"."+cons, server.Singleton),
		api("$JS.API.CONSUMER.MSG.NEXT."+out+"."+cons, server.Streamed),
		api("$JS.ACK."+out+"."+cons+".>", server.Singleton),
	)
}

// setupAccounts creates one account per declared bridge on the embedded
// server, exporting from the global account exactly [bridgeImports] to it,
// and returns the accounts by bridge name. It runs after JetStream started
// in the global account (JetStream is enabled there only while it is the
// server's sole account, so its data on disk stays where it was).
func setupAccounts(ns *server.Server, cfg Config) (map[string]*server.Account, error) {
	g := ns.GlobalAccount()
	accs := make(map[string]*server.Account, len(cfg.Bridges))
	for name, br := range cfg.Bridges {
		acc, err := ns.RegisterAccount(BridgeAccount(name))
		if err != nil {
			return nil, fmt.Errorf("account %s: %w", BridgeAccount(name), err)
		}
		for _, im := range bridgeImports(cfg.SubjectPrefix, name, br.Channels) {
			if im.stream {
				if err := g.AddStreamExport(im.to, []*server.Account{acc}); err != nil {
					return nil, fmt.Errorf("account %s: export stream %s: %w", BridgeAccount(name), im.to, err)
				}
				if err := acc.AddMappedStreamImport(g, im.to, im.from); err != nil {
					return nil, fmt.Errorf("account %s: import stream %s: %w", BridgeAccount(name), im.to, err)
				}
				continue
			}
			if err := g.AddServiceExportWithResponse(im.to, im.resp, []*server.Account{acc}); err != nil {
				return nil, fmt.Errorf("account %s: export service %s: %w", BridgeAccount(name), im.to, err)
			}
			if err := acc.AddServiceImport(g, im.from, im.to); err != nil {
				return nil, fmt.Errorf("account %s: import service %s as %s: %w", BridgeAccount(name), im.to, im.from, err)
			}
		}
		accs[name] = acc
	}
	return accs, nil
}
