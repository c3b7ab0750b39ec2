// The official openai npm package against Switchboard's OpenAI-compatible
// API. cmd/switchboard's TestOpenAINodeSDK starts a daemon (scripted model,
// channels.openai) and runs this file with:
//   SWITCHBOARD_OPENAI_URL  the API's base URL (http://127.0.0.1:<port>/v1)
//   SWITCHBOARD_OPENAI_KEY  a configured API key
// The scripted model answers "echo: <text>", streams a fixed sentence for
// "stream: ..." and writes a file with a tool for "tool: ...".
import { test } from 'node:test'
import assert from 'node:assert/strict'
import OpenAI, { AuthenticationError, APIError } from 'openai'

const baseURL = process.env.SWITCHBOARD_OPENAI_URL
const apiKey = process.env.SWITCHBOARD_OPENAI_KEY
if (!baseURL || !apiKey) throw new Error('SWITCHBOARD_OPENAI_URL and SWITCHBOARD_OPENAI_KEY must be set (run by TestOpenAINodeSDK)')

// The documented Node example (docs/openai-api.md), with retries off so
// that an error is seen as the server sent it.
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0 })

test('a non-streaming call returns the agent\'s answer', async () => {
  const completion = await client.chat.completions.create({
    model: 'switchboard',
    messages: [{ role: 'user', content: 'hello node' }],
  })
  assert.equal(completion.object, 'chat.completion')
  assert.equal(completion.choices[0].message.role, 'assistant')
  assert.equal(completion.choices[0].message.content, 'echo: hello node')
  assert.equal(completion.choices[0].finish_reason, 'stop')
})

test('a streaming call: the chunks add up to the final reply', async () => {
  const stream = await client.chat.completions.create({
    model: 'switchboard',
    messages: [{ role: 'user', content: 'stream: please' }],
    stream: true,
    stream_options: { include_usage: true },
  })
  let text = ''
  let role = ''
  let finish = null
  let usage = null
  let chunks = 0
  for await (const chunk of stream) {
    chunks++
    if (chunk.usage) usage = chunk.usage
    for (const choice of chunk.choices) {
      if (choice.delta.role) role = choice.delta.role
      text += choice.delta.content ?? ''
      if (choice.finish_reason) finish = choice.finish_reason
    }
  }
  assert.equal(text, 'one two three four five six seven eight nine ten')
  assert.equal(role, 'assistant')
  assert.equal(finish, 'stop')
  assert.ok(usage, 'a usage chunk with stream_options.include_usage')
  assert.ok(chunks >= 3, `${chunks} chunks`)
})

test('a turn that runs a tool returns the answer, not tool_calls', async () => {
  const completion = await client.chat.completions.create({
    model: 'switchboard',
    messages: [{ role: 'user', content: 'tool: save a note' }],
  })
  assert.equal(completion.choices[0].message.content, 'Saved the note.')
  assert.equal(completion.choices[0].message.tool_calls, undefined)
})

test('a wrong key raises the SDK\'s AuthenticationError', async () => {
  const wrong = new OpenAI({ baseURL, apiKey: 'sk-wrong-0123456789abcdef', maxRetries: 0 })
  await assert.rejects(
    wrong.chat.completions.create({ model: 'switchboard', messages: [{ role: 'user', content: 'hi' }] }),
    (err) => err instanceof AuthenticationError && err.status === 401 && err.code === 'invalid_api_key',
  )
})

test('an oversized body is refused with 413', async () => {
  await assert.rejects(
    client.chat.completions.create({ model: 'switchboard', messages: [{ role: 'user', content: 'x'.repeat(200 * 1024) }] }),
    (err) => err instanceof APIError && err.status === 413 && err.code === 'request_too_large',
  )
})

test('a retry with the same Idempotency-Key gets the same answer', async () => {
  const ask = () => client.chat.completions.create(
    { model: 'switchboard', messages: [{ role: 'user', content: 'retry me' }] },
    { headers: { 'Idempotency-Key': 'node-retry-1' } },
  )
  const first = await ask()
  const again = await ask()
  assert.equal(again.id, first.id)
  assert.equal(again.choices[0].message.content, 'echo: retry me')
  // The Go test checks that the model saw "retry me" once.
})
