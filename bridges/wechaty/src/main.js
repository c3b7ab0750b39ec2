#!/usr/bin/env node
// Runs the Switchboard bridge for Wechaty. Configuration comes from the
// environment (see README.md):
//
//   NATS_URL            the daemon's bus, e.g. nats://127.0.0.1:4222
//   NATS_TOKEN          the bridge's token (bus.bridges.<name>.token), or
//   NATS_USER, NATS_PASSWORD, or
//   NATS_NKEY_SEED      the seed of the bridge's NKey (SU...)
//   SWITCHBOARD_CHANNEL the channel name (default wechat)
//   SWITCHBOARD_BRIDGE  the bridge name in bus.bridges (default: the channel)
//   SWITCHBOARD_PREFIX  the subject prefix (default chat)
//   WECHATY_PUPPET      the Wechaty puppet, read by Wechaty itself
//
// SIGINT and SIGTERM stop it cleanly.

import { realpathSync } from 'node:fs'
import { fileURLToPath } from 'node:url'

import { connect, nkeyAuthenticator } from 'nats'
import { WechatyBuilder } from 'wechaty'

import { Bridge, inboxPrefix } from './bridge.js'

export function natsOptions (env, bridge) {
  const opts = {
    servers: env.NATS_URL || 'nats://127.0.0.1:4222',
    name: 'switchboard-bridge-wechaty',
    inboxPrefix: inboxPrefix(bridge),
    maxReconnectAttempts: -1,
  }
  if (env.NATS_TOKEN) opts.token = env.NATS_TOKEN
  if (env.NATS_USER) Object.assign(opts, { user: env.NATS_USER, pass: env.NATS_PASSWORD ?? '' })
  if (env.NATS_NKEY_SEED) opts.authenticator = nkeyAuthenticator(new TextEncoder().encode(env.NATS_NKEY_SEED))
  return opts
}

async function main () {
  const env = process.env
  const channel = env.SWITCHBOARD_CHANNEL || 'wechat'
  const bridgeName = env.SWITCHBOARD_BRIDGE || channel
  const log = (...a) => console.log(new Date().toISOString(), ...a)

  const nc = await connect(natsOptions(env, bridgeName))
  log('connected to', nc.getServer())
  const bot = WechatyBuilder.build({ name: 'switchboard-' + bridgeName })
  bot.on('scan', (qrcode) => log('scan to log in:', `https://wechaty.js.org/qrcode/${encodeURIComponent(qrcode)}`))
  bot.on('login', (user) => log('logged in as', user.name()))
  bot.on('error', (err) => log('wechaty error:', err.message))
  await bot.start()
  const bridge = new Bridge({ bot, nc, channel, bridge: bridgeName, prefix: env.SWITCHBOARD_PREFIX || 'chat', log })
  await bridge.start()
  log(`bridging channel ${channel} (bridge ${bridgeName})`)

  await new Promise((resolve) => {
    process.once('SIGINT', resolve)
    process.once('SIGTERM', resolve)
  })
  log('stopping')
  await bridge.stop()
  await bot.stop()
  await nc.drain()
}

if (process.argv[1] && realpathSync(process.argv[1]) === fileURLToPath(import.meta.url)) {
  main().catch((err) => {
    console.error('switchboard-bridge-wechaty:', err)
    process.exit(1)
  })
}
