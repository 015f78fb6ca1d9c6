"""Google's Gemini API (generateContent): its shared wire parts and one translator per endpoint it serves."""
