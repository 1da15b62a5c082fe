"""One module per API dialect: each validates its request body into a
`GenerationRequest` and writes the generation's events in its wire format
(a whole JSON body, or server-sent events). No dialect decodes anything.

* `chat`: OpenAI Chat Completions (``/v1/chat/completions``) and Completions
  (``/v1/completions``).
"""
