"""One HTTP client for the tests' requests to servers on loopback.

`httpx.get` builds a client per call, and each client builds an SSL context (the CA
bundle read and parsed): about 40 ms a request where the request itself takes 3 ms, and
the viewer's tests make hundreds. This client is built once. It keeps no connection
alive, so each request opens its own, as `httpx.get` does: a server stopped between two
requests, or a test that counts connections, sees what it would with `httpx.get`. Its
defaults (timeout, redirects, proxies from the environment) are `httpx.get`'s."""

import httpx

HTTP = httpx.Client(limits=httpx.Limits(max_keepalive_connections=0))
