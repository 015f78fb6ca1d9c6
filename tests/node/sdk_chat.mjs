// The openai Node SDK's chat: the request given as JSON in argv[2] is sent with
// chat.completions.create, and what came back is printed as JSON (tests/integration/test_chat_sdks.py
// reads it): the completion, or a stream's chunks in order. GATEWAY_URL and GATEWAY_KEY say where
// and with which key.
import OpenAI from "openai";

const client = new OpenAI({
  baseURL: `${process.env.GATEWAY_URL}/v5`,
  apiKey: process.env.GATEWAY_KEY,
  maxRetries: 0,
});

const request = JSON.parse(process.argv[2]);
if (request.stream) {
  const chunks = [];
  for await (const chunk of await client.chat.completions.create(request)) {
    chunks.push(chunk);
  }
  console.log(JSON.stringify({ chunks }));
} else {
  console.log(JSON.stringify({ completion: await client.chat.completions.create(request) }));
}
