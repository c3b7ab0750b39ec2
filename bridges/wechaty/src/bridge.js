// Switchboard bridge for Wechaty: maps Wechaty messages to bus protocol v1
// inbound envelopes and outbound envelopes back to say(). See
// docs/bus-protocol.md in the Switchboard repository for the protocol.

import { AckPolicy, DeliverPolicy, JSONCodec } from 'nats'
import { FileBox } from 'file-box'
import { types } from 'wechaty'

const jc = JSONCodec()

/** Largest image or file sent inline (base64) in an inbound envelope. */
export const MAX_INLINE_BYTES = 512 * 1024

/**
 * How many outbound ids are remembered, and for how long, to skip an
 * envelope already shown: the daemon may publish a final again with the
 * same id after a crash (docs/bus-protocol.md §5). Keep the time at least
 * the daemon's bus.out_retention (default 24 h); the default is twice it.
 */
export const SEEN_MAX = 100_000
export const SEEN_TTL_MS = 48 * 3600 * 1000

/**
 * A bounded set of outbound ids, each remembered for ttlMs: the first in
 * is forgotten first, when the set is full or its time is up.
 */
export class SeenIds {
  constructor ({ max = SEEN_MAX, ttlMs = SEEN_TTL_MS, now = Date.now } = {}) {
    this.max = max
    this.ttlMs = ttlMs
    this.now = now
    this.at = new Map() // id -> time added, in insertion order
  }

  expire () {
    const cutoff = this.now() - this.ttlMs
    for (const [id, t] of this.at) {
      if (t >= cutoff) break
      this.at.delete(id)
    }
  }

  has (id) {
    this.expire()
    return this.at.has(id)
  }

  /** Remembers id; returns false when it was remembered already. */
  add (id) {
    this.expire()
    if (this.at.has(id)) return false
    this.at.set(id, this.now())
    while (this.at.size > this.max) this.at.delete(this.at.keys().next().value)
    return true
  }

  get size () { return this.at.size }
}

/** Failed deliveries to WeChat are retried this many times. */
const MAX_SAY_ATTEMPTS = 5

/**
 * Encodes a chat id as one subject token: every byte outside [A-Za-z0-9_-]
 * becomes %XX with upper-case hex (bus protocol §2.2).
 * @param {string} s
 * @returns {string}
 */
export function encodeToken (s) {
  let out = ''
  for (const b of new TextEncoder().encode(s)) {
    const c = String.fromCharCode(b)
    out += /[A-Za-z0-9_-]/.test(c) ? c : '%' + b.toString(16).toUpperCase().padStart(2, '0')
  }
  return out
}

/** The name of a bridge's durable consumer on the out stream. */
export const consumerName = (bridge) => 'bridge_' + bridge

/** The inbox prefix a bridge must use when the bus enforces isolation. */
export const inboxPrefix = (bridge) => '_INBOX_' + bridge

/** Stream names derived from the subject prefix (bus protocol §2). */
export function streamNames (prefix) {
  const base = prefix.toUpperCase().replaceAll('.', '_')
  return { in: base + '_IN', out: base + '_OUT', dlq: base + '_DLQ' }
}

const attachmentKind = {
  [types.Message.Image]: 'image',
  [types.Message.Audio]: 'audio',
  [types.Message.Video]: 'file',
  [types.Message.Attachment]: 'file',
  [types.Message.Emoticon]: 'image',
}

/**
 * Maps a Wechaty message to an inbound envelope, or returns null for a
 * message the bridge does not forward (the bot's own messages).
 *
 *   DM:   chat_id = the contact's id, meta.contact_id
 *   room: chat_id = the room's id, is_group, mentioned = the bot was
 *         @-mentioned, meta.room_id and meta.talker_id (so the answer can
 *         mention the asker)
 *   image, audio, video, file: an attachment, inline (base64) up to
 *         MAX_INLINE_BYTES, else described by name and size only
 *
 * @param {import('wechaty').Message} msg
 * @param {{channel: string}} opts
 */
export async function toInbound (msg, { channel }) {
  if (msg.self()) return null
  const talker = msg.talker()
  const room = msg.room()
  const env = {
    v: 1,
    id: msg.id,
    channel,
    chat_id: room ? room.id : talker.id,
    user_id: talker.id,
    user_name: talker.name() || undefined,
    ts: msg.date().toISOString(),
    meta: room ? { room_id: room.id, talker_id: talker.id } : { contact_id: talker.id },
  }
  if (room) {
    env.is_group = true
    env.mentioned = await msg.mentionSelf()
  }
  const kind = attachmentKind[msg.type()]
  if (kind) {
    const box = await msg.toFileBox()
    const att = { kind, name: box.name || undefined, mime: mimeOf(box, kind) }
    const data = await box.toBase64()
    const size = Math.floor(data.length * 3 / 4) - (data.endsWith('==') ? 2 : data.endsWith('=') ? 1 : 0)
    att.size = size
    if (size <= MAX_INLINE_BYTES) {
      att.data = data
    } else {
      env.text = `[${kind} ${att.name ?? ''} too large to forward: ${size} bytes]`
    }
    env.attachments = [att]
    return env
  }
  env.text = msg.text() || `[${types.Message[msg.type()] ?? 'unsupported'} message]`
  return env
}

function mimeOf (box, kind) {
  const t = box.mediaType
  if (t && t !== 'application/octet-stream') return t
  return { image: 'image/jpeg', audio: 'audio/silk', file: 'application/octet-stream' }[kind]
}

/** Kinds that are shown in WeChat; deltas and typing are ignored. */
const SHOWN = new Set(['reply', 'notice', 'error'])

/**
 * A bridge between one Wechaty bot and the Switchboard bus. It is started
 * with start() and stopped with stop(); it never closes the NATS connection
 * or the bot it was given.
 */
export class Bridge {
  /**
   * @param {object} o
   * @param {import('wechaty').WechatyInterface} o.bot a started Wechaty
   * @param {import('nats').NatsConnection} o.nc connected with the bridge's
   *   credentials and inboxPrefix(bridge)
   * @param {string} [o.channel] channel name (default "wechat")
   * @param {string} [o.bridge] bridge name in the daemon's bus.bridges (default: channel)
   * @param {string} [o.prefix] subject prefix (default "chat")
   * @param {(…args: any[]) => void} [o.log]
   * @param {{max?: number, ttlMs?: number}} [o.seen] bounds of the shown
   *   outbound ids (default SEEN_MAX ids for SEEN_TTL_MS)
   */
  constructor ({ bot, nc, channel = 'wechat', bridge, prefix = 'chat', log = () => {}, seen = {} }) {
    this.bot = bot
    this.nc = nc
    this.channel = channel
    this.bridge = bridge ?? channel
    this.prefix = prefix
    this.log = log
    this.js = nc.jetstream()
    this.seen = new SeenIds(seen)
    this.duplicates = 0 // outbound envelopes dropped as already shown
    this.onMessage = (msg) => this.forward(msg).catch((err) => this.log('forward failed:', err.message))
    this.messages = null
    this.loop = null
  }

  /** Subscribes to the bot's messages and starts consuming outbound. */
  async start () {
    const consumer = await this.consumer()
    this.messages = await consumer.consume({ max_messages: 64 })
    this.loop = this.consumeLoop(this.messages)
    this.bot.on('message', this.onMessage)
  }

  /** Stops both directions and waits for the outbound loop to end. */
  async stop () {
    this.bot.off('message', this.onMessage)
    if (this.messages) {
      await this.messages.close()
      await this.loop
    }
  }

  /**
   * Looks up the durable consumer bridge_<name> (the daemon creates it for
   * declared bridges) or creates it, filtered to the channel, delivering
   * only new messages.
   */
  async consumer () {
    const stream = streamNames(this.prefix).out
    const name = consumerName(this.bridge)
    try {
      return await this.js.consumers.get(stream, name)
    } catch (err) {
      if (!/consumer not found/i.test(err.message)) throw err
    }
    const jsm = await this.nc.jetstreamManager()
    await jsm.consumers.add(stream, {
      durable_name: name,
      filter_subject: `${this.prefix}.out.${this.channel}.>`,
      deliver_policy: DeliverPolicy.New,
      ack_policy: AckPolicy.Explicit,
      ack_wait: 60_000_000_000,
    })
    return this.js.consumers.get(stream, name)
  }

  /** Publishes one Wechaty message as an inbound envelope. */
  async forward (msg) {
    const env = await toInbound(msg, { channel: this.channel })
    if (!env) return
    const subject = `${this.prefix}.in.${this.channel}.${encodeToken(env.chat_id)}`
    await this.js.publish(subject, jc.encode(env), { msgID: `${this.channel}:${env.id}` })
    this.log('inbound', env.id, 'on', subject)
  }

  async consumeLoop (messages) {
    for await (const m of messages) {
      let out
      try {
        out = jc.decode(m.data)
      } catch {
        m.term()
        continue
      }
      try {
        await this.deliver(out)
        m.ack()
      } catch (err) {
        if (m.info.redeliveryCount >= MAX_SAY_ATTEMPTS) {
          this.log('giving up on outbound', out.id, err.message)
          m.term()
        } else {
          this.log('outbound', out.id, 'failed, retrying:', err.message)
          m.nak(2000)
        }
      }
    }
  }

  /**
   * Shows one outbound envelope in WeChat: reply, notice and error
   * messages (final or not) with text or attachments; typing and deltas
   * are ignored, and so is an id already shown (a redelivery, or a final
   * the daemon published again after a crash; the message is still
   * acknowledged).
   */
  async deliver (out) {
    if (!SHOWN.has(out.kind)) return
    if (this.seen.has(out.id)) {
      this.duplicates++
      this.log('outbound', out.id, 'already shown; dropping the copy')
      return
    }
    const text = out.text ?? ''
    const attachments = out.attachments ?? []
    if (text === '' && attachments.length === 0) return
    const meta = out.meta ?? {}
    let target
    let mention
    if (meta.room_id) {
      target = await this.bot.Room.find({ id: meta.room_id })
      if (meta.talker_id) mention = await this.bot.Contact.find({ id: meta.talker_id })
    } else {
      target = await this.bot.Contact.find({ id: meta.contact_id ?? out.chat_id })
    }
    if (!target) throw new Error(`chat ${out.chat_id} not found`)
    if (text !== '') {
      if (mention) await target.say(text, mention)
      else await target.say(text)
    }
    for (const a of attachments) {
      if (a.data) await target.say(FileBox.fromBase64(a.data, a.name || 'file'))
      else if (a.url) await target.say(FileBox.fromUrl(a.url, { name: a.name || undefined }))
    }
    this.seen.add(out.id)
    this.log('outbound', out.id, out.kind, 'shown in', out.chat_id)
  }
}
