// The openai Node SDK's view of a gateway's 422: the request given as JSON in argv[2] is sent with
// completions.create; what the SDK raised is printed as JSON (tests/integration/test_sdks.py reads it).
// GATEWAY_URL and GATEWAY_KEY say where and with which key.
import OpenAI from "openai";

const client = new OpenAI({
  baseURL: `${process.env.GATEWAY_URL}/v5`,
  apiKey: process.env.GATEWAY_KEY,
  maxRetries: 0,
});

try {
  await client.completions.create(JSON.parse(process.argv[2]));
  console.log(JSON.stringify({ raised: false }));
} catch (error) {
  console.log(JSON.stringify({
    raised: true,
    kind: error.constructor.name,
    status: error.status,
    message: error.message,
    type: error.type,
    code: error.code,
    param: error.param,
    shouldRetry: error.headers?.get("x-should-retry"),
  }));
}
