-- wrk: the request with the headers a browser sends (~480 bytes of head:
-- user agent, accepts, fetch metadata, a cookie), for the request-head parse
-- as a browser client makes it (bench/code_footprint.py --script).
wrk.headers["User-Agent"] = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36"
wrk.headers["Accept"] = "text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,*/*;q=0.8"
wrk.headers["Accept-Language"] = "en-US,en;q=0.9"
wrk.headers["Accept-Encoding"] = "gzip, deflate, br, zstd"
wrk.headers["Connection"] = "keep-alive"
wrk.headers["Upgrade-Insecure-Requests"] = "1"
wrk.headers["Sec-Fetch-Dest"] = "document"
wrk.headers["Sec-Fetch-Mode"] = "navigate"
wrk.headers["Cookie"] = "session=3f2a9c0e7b1d4e5f8a6b2c3d4e5f6a7b; theme=dark; _ga=GA1.1.123456789.1700000000"
