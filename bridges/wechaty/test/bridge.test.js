// End-to-end test of the Wechaty bridge: a mock WeChat network
// (wechaty-puppet-mock), the bridge, and a real Switchboard daemon.
//
// With NATS_URL set (its credentials in it, or in NATS_TOKEN, or in
// NATS_USER and NATS_PASSWORD) the test uses that running daemon. Otherwise
// it builds cmd/switchboard and cmd/fakellm from this repository, starts the
// scripted model in echo mode and a daemon with the bridges "wechat" (a
// token) and "line" (a user and a password) declared, connects through
// NATS_URL=nats://TOKEN@127.0.0.1:<port>, and stops both at the end.
// EXPECT_REPLY, when set, must appear in the reply.
//
// A failing test must end the run, not hang it: whatever a test opens (a
// Wechaty bot, a NATS connection, a bridge) is registered with closeAfter
// and closed after the test, pass or fail, even when it threw before its
// own cleanup; each test and hook has a time limit; the daemon and the
// scripted model are killed after the last test, and with this process if
// it ends any other way. An open bot or connection would keep this process,
// and `npm test` with it, alive for good.

import { test, before, after, afterEach } from 'node:test'
import assert from 'node:assert/strict'
import { spawn, execFile } from 'node:child_process'
import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import { createServer } from 'node:net'
import { tmpdir } from 'node:os'
import { dirname, join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import { promisify } from 'node:util'
import { randomBytes } from 'node:crypto'

import { connect } from 'nats'
import { WechatyBuilder } from 'wechaty'
import { PuppetMock, mock } from 'wechaty-puppet-mock'
import { FileBox } from 'file-box'

import { Bridge, SeenIds, encodeToken, toInbound } from '../src/bridge.js'
import { natsOptions, parseNatsURL, redactNatsURL } from '../src/main.js'

const repo = resolve(dirname(fileURLToPath(import.meta.url)), '../../..')
const WAIT = 60_000
/** Time limits: one test, the build and start of the daemon, one cleanup. */
const TEST_TIMEOUT = 3 * WAIT
const SETUP_TIMEOUT = 10 * WAIT
const CLOSE_TIMEOUT = 15_000

/** Resolves or rejects as p does, or rejects after ms. */
async function within (ms, what, p) {
  let timer
  const late = new Promise((resolve, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: not done within ${ms} ms`)), ms)
  })
  try {
    return await Promise.race([p, late])
  } finally {
    clearTimeout(timer)
  }
}

// What the running test opened, closed by afterEach in reverse order.
const opened = []

/** Registers close to run after the current test, pass or fail. */
function closeAfter (what, close) {
  opened.push({ what, close })
}

afterEach(async () => {
  const errs = []
  while (opened.length > 0) {
    const { what, close } = opened.pop()
    try {
      await within(CLOSE_TIMEOUT, `closing ${what}`, Promise.resolve().then(close))
    } catch (err) {
      errs.push(err)
    }
  }
  if (errs.length > 0) throw new AggregateError(errs, errs.map((e) => e.message).join('; '))
})

/** A NATS connection closed after the test. */
async function natsConnect (opts) {
  const nc = await connect(opts)
  closeAfter('a NATS connection', () => nc.close())
  return nc
}

/** A bridge started on bot and nc, stopped after the test. */
async function startBridge (opts) {
  const bridge = new Bridge(opts)
  closeAfter('the bridge', () => bridge.stop())
  await bridge.start()
  return bridge
}

/**
 * Resolves with the first value subscribe hands to its callback, or
 * rejects after ms. A wait still pending when the test ends is dropped.
 */
function waitFor (what, subscribe, ms = WAIT) {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`timed out waiting for ${what}`)), ms)
    closeAfter(`the wait for ${what}`, () => clearTimeout(timer))
    subscribe((value) => {
      clearTimeout(timer)
      resolve(value)
    })
  })
}

/** Waits until a child process writes a line matching re (stdout or stderr). */
function waitOutput (child, re, what) {
  return new Promise((resolve, reject) => {
    let buf = ''
    const done = (err, m) => {
      clearTimeout(timer)
      child.stdout.off('data', onData)
      child.stderr.off('data', onData)
      child.off('exit', onExit)
      if (err) reject(err)
      else resolve(m)
    }
    const onData = (d) => {
      buf += d.toString()
      const m = buf.match(re)
      if (m) done(null, m)
    }
    const onExit = (code) => done(new Error(`${what}: exited with ${code}:\n${buf}`))
    const timer = setTimeout(() => done(new Error(`timed out waiting for ${what}:\n${buf}`)), WAIT)
    child.stdout.on('data', onData)
    child.stderr.on('data', onData)
    child.once('exit', onExit)
  })
}

function freePort () {
  return new Promise((resolve, reject) => {
    const s = createServer()
    s.once('error', reject)
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address()
      s.close(() => resolve(port))
    })
  })
}

/** Whether a child process has ended (by itself or by a signal). */
const ended = (child) => child.exitCode !== null || child.signalCode !== null

async function stopChild (child) {
  if (!child || ended(child)) return
  const exited = new Promise((resolve) => child.once('exit', resolve))
  child.kill('SIGTERM')
  const timer = setTimeout(() => child.kill('SIGKILL'), 10_000)
  await exited
  clearTimeout(timer)
}

// The daemon the test talks to: an outside one (NATS_URL) or its own.
const daemon = { env: {}, children: [], dir: null, own: null }

// However this process ends, the daemon and the model end with it.
process.on('exit', () => {
  for (const c of daemon.children) if (!ended(c)) c.kill('SIGKILL')
})

before(async () => {
  if (process.env.NATS_URL) {
    daemon.env = process.env
    return
  }
  daemon.dir = await mkdtemp(join(tmpdir(), 'switchboard-wechaty-'))
  const bin = join(daemon.dir, 'bin')
  await promisify(execFile)('go', ['build', '-o', bin + '/', './cmd/switchboard', './cmd/fakellm'], { cwd: repo })

  const llm = spawn(join(bin, 'fakellm'), ['--mode', 'echo', '--listen', '127.0.0.1:0'])
  daemon.children.push(llm)
  const [, llmURL] = await waitOutput(llm, /on (http:\/\/\S+\/v1)/, 'fakellm to start')

  const port = await freePort()
  const token = randomBytes(16).toString('hex')
  const linePassword = 'p@ss:' + randomBytes(8).toString('hex') // percent-encoded in the URL
  const adminToken = randomBytes(16).toString('hex')
  const config = join(daemon.dir, 'config.yaml')
  await writeFile(config, `data_dir: ${join(daemon.dir, 'data')}
bus:
  listen: 127.0.0.1:${port}
  bridges:
    wechat:
      channels: [wechat]
      token: ${token}
    line:
      channels: [line]
      user: line
      password: "${linePassword}"
  admin:
    token: ${adminToken}
llm:
  base_url: ${llmURL}
  api_key: test
  model: echo
agent:
  workspace: ${join(daemon.dir, 'workspace')}
admin:
  listen: ""
`)
  const sb = spawn(join(bin, 'switchboard'), ['serve', '--config', config])
  daemon.children.push(sb)
  await waitOutput(sb, /switchboard is running/, 'the daemon to start')
  daemon.env = { NATS_URL: `nats://${token}@127.0.0.1:${port}` }
  daemon.own = { port, token, linePassword, adminToken }
}, { timeout: SETUP_TIMEOUT })

after(async () => {
  for (const c of daemon.children.reverse()) await stopChild(c)
  if (daemon.dir) await rm(daemon.dir, { recursive: true, force: true })
}, { timeout: SETUP_TIMEOUT })

/**
 * A mock WeChat network with the bot logged in, and two contacts; the bot
 * is stopped after the test.
 */
async function mockWeChat () {
  const mocker = new mock.Mocker()
  const puppet = new PuppetMock({ mocker })
  const bot = WechatyBuilder.build({ puppet, name: 'bridge-test-' + randomBytes(4).toString('hex') })
  closeAfter('the Wechaty bot', () => bot.stop())
  await bot.start()
  const [self, mike, mary] = mocker.createContacts(3)
  mocker.login(self)
  const room = mocker.createRoom({ topic: 'lunch', memberIdList: [self.id, mike.id, mary.id] })
  return { mocker, bot, self, mike, mary, room }
}

/** The next Wechaty message the bot sees that pred accepts. */
function nextMessage (bot, pred = () => true) {
  return waitFor('a Wechaty message', (done) => {
    const on = (msg) => { if (pred(msg)) { bot.off('message', on); done(msg) } }
    bot.on('message', on)
  }, 5_000)
}

test('a mock contact says hello and gets the daemon\'s answer', { timeout: TEST_TIMEOUT }, async () => {
  const { bot, self, mike } = await mockWeChat()
  const channel = daemon.env.SWITCHBOARD_CHANNEL || 'wechat'
  const nc = await natsConnect({ ...natsOptions(daemon.env, daemon.env.SWITCHBOARD_BRIDGE || channel), maxReconnectAttempts: 0 })
  await startBridge({ bot, nc, channel, bridge: daemon.env.SWITCHBOARD_BRIDGE, prefix: daemon.env.SWITCHBOARD_PREFIX })
  const reply = waitFor('the reply to reach the mock contact', (done) => {
    mike.on('message', (m) => { if (m.talker().id === self.id) done(m.text()) })
  })
  mike.say('hello').to(self)
  const text = await reply
  assert.ok(text.trim().length > 0, 'the reply is empty')
  if (process.env.EXPECT_REPLY) assert.ok(text.includes(process.env.EXPECT_REPLY), `reply ${JSON.stringify(text)} lacks ${process.env.EXPECT_REPLY}`)
  else if (!process.env.NATS_URL) assert.match(text, /echo: .*hello/)
})

// Issue 21: a message the daemon refuses (here 70,000 bytes, over the
// default bus.max_text_bytes) is answered in its chat with an error final
// that names the limit, instead of leaving the user waiting.
test('a refused room message is answered in the room with the reason', { timeout: TEST_TIMEOUT }, async (t) => {
  if (!daemon.own) return t.skip('needs the test\'s own daemon (NATS_URL is set)')
  const { bot, self, mike, room } = await mockWeChat()
  const nc = await natsConnect({ ...natsOptions(daemon.env, 'wechat'), maxReconnectAttempts: 0 })
  await startBridge({ bot, nc, channel: 'wechat' })
  const answer = waitFor('the refusal to reach the room', (done) => {
    room.on('message', (m) => { if (m.talker().id === self.id) done(m.text()) })
  })
  mike.say('x'.repeat(70000)).to(room)
  const text = await answer
  assert.match(text, /not accepted: it is too long/)
  assert.match(text, /Received 70000 bytes of text; the limit is 65536 bytes/)
})

test('messages map to inbound envelopes', { timeout: TEST_TIMEOUT }, async () => {
  const { bot, self, mike, room } = await mockWeChat()
  let got = nextMessage(bot)
  mike.say('hi there').to(self)
  let env = await toInbound(await got, { channel: 'wechat' })
  assert.equal(env.chat_id, mike.id)
  assert.equal(env.user_id, mike.id)
  assert.equal(env.text, 'hi there')
  assert.equal(env.is_group, undefined)
  assert.deepEqual(env.meta, { contact_id: mike.id })
  assert.match(env.ts, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+Z$/)

  got = nextMessage(bot)
  mike.say('@bot lunch?', [self]).to(room)
  env = await toInbound(await got, { channel: 'wechat' })
  assert.equal(env.chat_id, room.id)
  assert.equal(env.is_group, true)
  assert.equal(env.mentioned, true)
  assert.deepEqual(env.meta, { room_id: room.id, talker_id: mike.id })

  got = nextMessage(bot)
  mike.say('no mention').to(room)
  env = await toInbound(await got, { channel: 'wechat' })
  assert.equal(env.mentioned, false)

  got = nextMessage(bot)
  mike.say(FileBox.fromBase64('iVBORw0KGgo=', 'dot.png')).to(self)
  env = await toInbound(await got, { channel: 'wechat' })
  assert.equal(env.text, undefined)
  assert.deepEqual(env.attachments, [{ kind: 'image', name: 'dot.png', mime: 'image/png', size: 8, data: 'iVBORw0KGgo=' }])

  // The bot's own messages are not forwarded.
  got = nextMessage(bot, (m) => m.self())
  await (await bot.Contact.find({ id: mike.id })).say('from the bot')
  assert.equal(await toInbound(await got, { channel: 'wechat' }), null)
})

test('outbound envelopes go back to the right chat', { timeout: TEST_TIMEOUT }, async () => {
  const { bot, self, mike, room } = await mockWeChat()
  const bridge = new Bridge({ bot, nc: { jetstream: () => null }, channel: 'wechat' })
  const inRoom = waitFor('the room answer', (done) => {
    room.on('message', (m) => { if (m.talker().id === self.id) done(m) })
  })
  await bridge.deliver({ v: 1, id: 'o1', channel: 'wechat', chat_id: room.id, kind: 'reply', text: 'pizza', final: true, meta: { room_id: room.id, talker_id: mike.id } })
  const m = await inRoom
  assert.match(m.text(), /pizza/)
  assert.match(m.text(), new RegExp('@' + mike.payload.name)) // the asker is mentioned

  const dm = []
  mike.on('message', (msg) => { if (msg.talker().id === self.id) dm.push(msg.text()) })
  const shown = waitFor('the DM answer', (done) => mike.on('message', (msg) => { if (msg.text() === 'done') done() }))
  for (const kind of ['typing', 'delta']) {
    await bridge.deliver({ v: 1, id: 'x-' + kind, channel: 'wechat', chat_id: mike.id, kind, text: 'partial', seq: 1, meta: { contact_id: mike.id } })
  }
  const final = { v: 1, id: 'o2', channel: 'wechat', chat_id: mike.id, kind: 'notice', text: 'done', final: true, meta: { contact_id: mike.id } }
  await bridge.deliver(final)
  await bridge.deliver(final) // a redelivery is not shown twice
  await shown
  assert.deepEqual(dm, ['done'])
})

test('chat ids are encoded as in the protocol', () => {
  assert.equal(encodeToken('wxid_abc123@chatroom'), 'wxid_abc123%40chatroom')
  assert.equal(encodeToken('a.b'), 'a%2Eb')
  assert.equal(encodeToken('张三'), '%E5%BC%A0%E4%B8%89')
  assert.equal(encodeToken('-100123'), '-100123')
})

test('NATS_URL carries the credentials as nats.go reads them', () => {
  assert.deepEqual(parseNatsURL('nats://s3cret@127.0.0.1:4222'), { servers: ['nats://127.0.0.1:4222'], token: 's3cret' })
  assert.deepEqual(parseNatsURL('nats://line:p%40ss%3Ax@[::1]:4222, nats://line:p%40ss%3Ax@h2:4222'),
    { servers: ['nats://[::1]:4222', 'nats://h2:4222'], user: 'line', pass: 'p@ss:x' })
  assert.deepEqual(parseNatsURL('nats://a:4222,b:4222'), { servers: ['nats://a:4222', 'b:4222'] })
  assert.throws(() => parseNatsURL('nats://t1@a:4222,nats://t2@b:4222'), /different credentials/)
  assert.throws(() => parseNatsURL('tok@a:4222'), /nats:\/\/TOKEN@host:port/)

  const withURL = natsOptions({ NATS_URL: 'nats://s3cret@127.0.0.1:4222' }, 'wechat')
  assert.equal(withURL.token, 's3cret')
  assert.deepEqual(withURL.servers, ['nats://127.0.0.1:4222']) // nats.js gets no credentials in the address
  assert.equal(withURL.inboxPrefix, '_INBOX_wechat')
  const withEnv = natsOptions({ NATS_URL: 'nats://127.0.0.1:4222', NATS_TOKEN: 's3cret' }, 'wechat')
  assert.equal(withEnv.token, 's3cret')
  const withUser = natsOptions({ NATS_URL: 'nats://line:pw@h:1' }, 'line')
  assert.deepEqual([withUser.user, withUser.pass, withUser.token], ['line', 'pw', undefined])
  assert.throws(() => natsOptions({ NATS_URL: 'nats://t@h:1', NATS_TOKEN: 't' }, 'w'), /set one kind of credentials/)
  assert.throws(() => natsOptions({ NATS_PASSWORD: 'p' }, 'w'), /NATS_USER: required/)
  assert.equal(redactNatsURL('nats://s3cret@h:1,nats://u:pw@h:2,nats://h:3'), 'nats://xxxxx@h:1,nats://u:xxxxx@h:2,nats://h:3')
})

test('the daemon\'s bus accepts the bridges\' own credentials only', { timeout: TEST_TIMEOUT }, async (t) => {
  if (!daemon.own) return t.skip('needs the test\'s own daemon (NATS_URL is set)')
  const { port, token, linePassword } = daemon.own
  const addr = `127.0.0.1:${port}`
  const publishAs = async (env, bridge, channel) => {
    const nc = await natsConnect({ ...natsOptions(env, bridge), maxReconnectAttempts: 0 })
    const id = randomBytes(4).toString('hex')
    const msg = { v: 1, id, channel, chat_id: 'c', user_id: 'u', text: 'hi' }
    const ack = await nc.jetstream().publish(`chat.in.${channel}.c`, JSON.stringify(msg), { msgID: `${channel}:${id}` })
    assert.equal(ack.stream, 'CHAT_IN')
  }
  await publishAs({ NATS_URL: `nats://${token}@${addr}` }, 'wechat', 'wechat')
  await publishAs({ NATS_URL: `nats://${addr}`, NATS_TOKEN: token }, 'wechat', 'wechat')
  await publishAs({ NATS_URL: `nats://line:${encodeURIComponent(linePassword)}@${addr}` }, 'line', 'line')
  await publishAs({ NATS_URL: `nats://${addr}`, NATS_USER: 'line', NATS_PASSWORD: linePassword }, 'line', 'line')
  for (const env of [{ NATS_URL: `nats://${addr}` }, { NATS_URL: `nats://wrong-token@${addr}` }, { NATS_URL: `nats://line:wrong@${addr}` }]) {
    await assert.rejects(natsConnect({ ...natsOptions(env, 'wechat'), maxReconnectAttempts: 0 }),
      (err) => err.code === 'AUTHORIZATION_VIOLATION', `${redactNatsURL(env.NATS_URL)} was not refused`)
  }
})

// The daemon may publish a final again with the same id (a crash after its
// publish, before its ack). Within CHAT_OUT's de-duplication window the
// stream drops the copy; a copy published after it is stored and delivered
// again. The bridge shows the answer once and acknowledges the copy.
test('a final re-published with the same id is shown once', { timeout: TEST_TIMEOUT }, async (t) => {
  if (!daemon.own) return t.skip('needs the test\'s own daemon (NATS_URL is set)')
  const { port, token, adminToken } = daemon.own
  const { bot, self, mike } = await mockWeChat()
  const nc = await natsConnect({ ...natsOptions({ NATS_URL: `nats://${token}@127.0.0.1:${port}` }, 'wechat') })
  const admin = await natsConnect({ servers: `127.0.0.1:${port}`, token: adminToken })
  const dm = []
  mike.on('message', (msg) => { if (msg.talker().id === self.id) dm.push(msg.text()) })
  const bridge = await startBridge({ bot, nc, channel: 'wechat' })
  const subject = `chat.out.wechat.${encodeToken(mike.id)}`
  const final = (id, text) => JSON.stringify({ v: 1, id, channel: 'wechat', chat_id: mike.id, in_reply_to: 'in-' + id, kind: 'reply', text, seq: 1, final: true, meta: { contact_id: mike.id } })
  const js = admin.jetstream()
  const id1 = 'rp-' + randomBytes(4).toString('hex')
  const id2 = 'rp-' + randomBytes(4).toString('hex')
  await js.publish(subject, final(id1, 'first answer'), { msgID: id1 })
  const dup = await js.publish(subject, final(id1, 'first answer'), { msgID: id1 })
  assert.equal(dup.duplicate, true, 'a republish within the window is a duplicate for the stream')
  await js.publish(subject, final(id1, 'first answer')) // the copy stored after the window
  const second = waitFor('the second answer', (done) => mike.on('message', (m) => { if (m.text() === 'second answer') done() }))
  await js.publish(subject, final(id2, 'second answer'), { msgID: id2 })
  await second
  assert.deepEqual(dm, ['first answer', 'second answer'])
  assert.equal(bridge.duplicates, 1)
})

test('shown outbound ids are bounded in number and time', () => {
  let now = 0
  const seen = new SeenIds({ max: 2, ttlMs: 1000, now: () => now })
  assert.equal(seen.add('a'), true)
  assert.equal(seen.add('a'), false)
  seen.add('b')
  seen.add('c') // over max: the oldest goes
  assert.equal(seen.has('a'), false)
  assert.equal(seen.has('b'), true)
  now = 1500 // past the time: forgotten
  assert.equal(seen.has('c'), false)
  assert.equal(seen.size, 0)
})
