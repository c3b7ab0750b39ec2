#!/usr/bin/env node
// Runs the Switchboard bridge for Wechaty. Configuration comes from the
// environment (see README.md):
//
//   NATS_URL            the daemon's bus, e.g. nats://127.0.0.1:4222 (several:
//                       comma-separated); it may carry the credentials:
//                       nats://TOKEN@host:4222 or nats://user:password@host:4222
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

/**
 * Splits a NATS_URL (one URL or a comma-separated list) into the server
 * addresses nats.js takes and the credentials carried in them, which nats.js
 * does not read from a URL itself: "nats://TOKEN@host:4222" is a token,
 * "nats://user:password@host:4222" a user and a password (percent-encoded
 * characters decoded), as nats.go and the nats CLI read them. Every URL
 * that carries credentials must carry the same ones.
 * @param {string} natsURL
 * @returns {{servers: string[], token?: string, user?: string, pass?: string}}
 */
export function parseNatsURL (natsURL) {
  const servers = []
  let creds = null
  for (const part of natsURL.split(',').map((p) => p.trim()).filter(Boolean)) {
    if (!/^[a-z][a-z0-9+.-]*:\/\//i.test(part)) {
      if (part.includes('@')) throw new Error('NATS_URL: write credentials as nats://TOKEN@host:port or nats://user:password@host:port')
      servers.push(part)
      continue
    }
    let u
    try {
      u = new URL(part)
    } catch {
      throw new Error(`NATS_URL: not a URL: ${redactNatsURL(part)}`)
    }
    if (u.username || u.password) {
      const c = u.password
        ? { user: decodeURIComponent(u.username), pass: decodeURIComponent(u.password) }
        : { token: decodeURIComponent(u.username) }
      if (creds && JSON.stringify(creds) !== JSON.stringify(c)) throw new Error('NATS_URL: the URLs carry different credentials')
      creds = c
    }
    servers.push(`${u.protocol}//${u.host}`)
  }
  if (servers.length === 0) throw new Error('NATS_URL: no server')
  return { servers, ...creds }
}

/** Hides the credentials of a NATS URL (list) for logs and errors. */
export function redactNatsURL (natsURL) {
  return natsURL.replace(/\/\/[^/@,]*@/g, (m) => (m.includes(':') ? '//' + m.slice(2).split(':')[0] + ':xxxxx@' : '//xxxxx@'))
}

/**
 * The nats.js connect options of the bridge named bridge, from the
 * environment (see the top of this file). Credentials come from NATS_URL,
 * or from NATS_TOKEN, NATS_USER and NATS_PASSWORD, or NATS_NKEY_SEED: set
 * one kind only.
 */
export function natsOptions (env, bridge) {
  const { servers, token, user, pass } = parseNatsURL(env.NATS_URL || 'nats://127.0.0.1:4222')
  const opts = {
    servers,
    name: 'switchboard-bridge-wechaty',
    inboxPrefix: inboxPrefix(bridge),
    maxReconnectAttempts: -1,
  }
  const kinds = [token !== undefined || user !== undefined, !!env.NATS_TOKEN, !!(env.NATS_USER || env.NATS_PASSWORD), !!env.NATS_NKEY_SEED]
  if (kinds.filter(Boolean).length > 1) {
    throw new Error('set one kind of credentials: in NATS_URL, or NATS_TOKEN, or NATS_USER and NATS_PASSWORD, or NATS_NKEY_SEED')
  }
  if (token !== undefined) opts.token = token
  if (user !== undefined) Object.assign(opts, { user, pass })
  if (env.NATS_TOKEN) opts.token = env.NATS_TOKEN
  if (env.NATS_USER || env.NATS_PASSWORD) {
    if (!env.NATS_USER) throw new Error('NATS_USER: required with NATS_PASSWORD')
    Object.assign(opts, { user: env.NATS_USER, pass: env.NATS_PASSWORD ?? '' })
  }
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
