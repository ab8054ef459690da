"""A stand-in for the Hugging Face Hub on loopback, with fault injection, for download_assets tests.

Two HTTP servers: the "hub" on 127.0.0.1 (repo listings, /resolve/ URLs, auth, gated repos) and the
"storage" host on localhost (LFS blobs behind 302 redirects, like the Hub's CDN). Repos are folders
under --repos (ORG/NAME/...). Faults come from --config (JSON):
  commit: str                      commit sha reported for every repo
  gated: {repo_id: token}          repos that need "Authorization: Bearer <token>"
  lfs_min_size: int                files at least this big (and *.safetensors) live on storage
  drop_every: int                  storage cuts every response at each multiple of this offset
  errors: {path: [status, ...]}    resolve answers these statuses first, one per request
  listing_errors: [status, ...]    the listing answers these statuses first
  listing_body: str                the listing answers 200 with this body instead
  trickle: {path: seconds}         first storage response of path dribbles bytes, then hangs up
  corrupt: {path: count}           first `count` responses of path have one byte flipped
  extra_siblings: {repo_id: [name]}  names added to the listing (unsafe-name tests)
  missing: [path]                  listed, but resolve answers 404 EntryNotFound
  list_size: {path: size}          the listing gives this size instead of the file's
  no_digest: [path]                the listing gives no blobId nor LFS sha256 (the ETag still does)
  lfs_fields: {path: {key: value}}  the listing's "lfs" object of path gets these keys (null
                                   removes one): a missing or malformed sha256, an "oid"
  no_etag: [path]                  responses for path carry neither ETag nor X-Linked-Etag
  no_redirect: [path]              resolve serves the LFS file path itself (200, as a mirror
                                   may), with the X-Linked-Etag a redirect would carry
  tamper: {path: [file, how(, when)]}  first response of path, halfway through its body, changes
                                   `file` (the client's part file): "append" 100 bytes,
                                   "truncate" it to 0, "replace" it by a new file of the size
                                   the client expects, or "rewrite" its bytes in place with zeros
                                   (same size, same inode); when "after_cut", 0.2 s after
                                   drop_every cut that response instead (the client's backoff)
  retry_after: str                 Retry-After header on the 429 and 503 of errors/listing_errors
  range_start: {path: offset}      a Range request of path is answered 206 from this byte
  ignore_range: [path]             a Range request of path is answered 200 with the whole file
  no_size_headers: [path]          bodies without Content-Length (ended by closing), 416 without
                                   Content-Range: the client cannot learn the size from headers
Every request is appended to --log as one JSON line (method, path, headers). The servers stop
after --lifetime seconds or when the parent process goes away.
"""

import argparse
import hashlib
import http.server
import json
import os
import threading
import time
import urllib.parse

LFS_SUFFIXES = (".safetensors", ".model", ".bin", ".pth")


class Repos:
    def __init__(self, root, config):
        self.root = root
        self.config = config
        self.commit = config.get("commit", "0" * 40)
        self.lock = threading.Lock()
        self.errors = {k: list(v) for k, v in config.get("errors", {}).items()}
        self.listing_errors = list(config.get("listing_errors", []))
        self.corrupt = dict(config.get("corrupt", {}))
        self.trickle = dict(config.get("trickle", {}))
        self.tamper = dict(config.get("tamper", {}))
        self.files = {}  # repo_id -> {path: info}
        self.blobs = {}  # sha256 -> (abs path, repo path)
        for org in sorted(os.listdir(root)):
            for name in sorted(os.listdir(os.path.join(root, org))):
                repo_id = f"{org}/{name}"
                base = os.path.join(root, org, name)
                entries = {}
                for dirpath, _, filenames in os.walk(base):
                    for filename in sorted(filenames):
                        full = os.path.join(dirpath, filename)
                        rel = os.path.relpath(full, base)
                        entries[rel] = self._describe(full, rel)
                self.files[repo_id] = entries

    def _describe(self, full, rel):
        size = os.path.getsize(full)
        sha256 = hashlib.sha256()
        sha1 = hashlib.sha1(b"blob %d\0" % size)
        with open(full, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 22), b""):
                sha256.update(chunk)
                sha1.update(chunk)
        lfs = rel.endswith(LFS_SUFFIXES) or size >= self.config.get("lfs_min_size", 1 << 40)
        info = {"full": full, "size": size, "sha256": sha256.hexdigest(), "sha1": sha1.hexdigest(),
                "lfs": lfs}
        if lfs:
            self.blobs[info["sha256"]] = (full, rel)
        return info

    def pop(self, table, key):
        with self.lock:
            queue = table.get(key)
            return queue.pop(0) if queue else None

    def take_count(self, table, key):
        with self.lock:
            if table.get(key, 0) > 0:
                table[key] -= 1
                return True
            return False


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "FakeHub/1.0"

    def log_message(self, fmt, *args):
        pass

    def record(self):
        entry = {"t": time.time(), "server": self.server.role, "method": self.command,
                 "path": self.path,
                 "headers": {k.lower(): v for k, v in self.headers.items()}}
        with self.server.log_lock:
            with open(self.server.log_path, "a") as log:
                log.write(json.dumps(entry) + "\n")

    def reply(self, status, body=b"", headers=None):
        self.send_response(status)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def error(self, status, code, message):
        self.reply(status, json.dumps({"error": message}).encode(),
                   {"X-Error-Code": code, "X-Error-Message": message,
                    "Content-Type": "application/json"})

    def do_HEAD(self):
        self.do_GET()

    def do_GET(self):
        self.record()
        try:
            if self.server.role == "hub":
                self.hub()
            else:
                self.storage()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    # --- hub -----------------------------------------------------------------------------------
    def authorized(self, repo_id):
        repos = self.server.repos
        token = repos.config.get("gated", {}).get(repo_id)
        if token is None:
            return True
        auth = self.headers.get("Authorization")
        message = (f"Access to model {repo_id} is restricted. You must have access to it and be "
                   "authenticated to access it. Please log in.")
        if auth is None:
            self.error(401, "GatedRepo", message)
            return False
        if auth != f"Bearer {token}":
            self.error(403, "GatedRepo", message)
            return False
        return True

    def hub(self):
        repos = self.server.repos
        url = urllib.parse.urlsplit(self.path)
        parts = [urllib.parse.unquote(p) for p in url.path.split("/")]
        if len(parts) == 7 and parts[1:3] == ["api", "models"] and parts[5] == "revision":
            repo_id, revision = f"{parts[3]}/{parts[4]}", parts[6]
            status = repos.pop({"l": repos.listing_errors}, "l")
            if status is not None:
                return self.reply(status, b"temporarily unavailable", self.retry_after(status))
            if "listing_body" in repos.config:
                return self.reply(200, repos.config["listing_body"].encode())
            return self.listing(repo_id, revision)
        if len(parts) >= 6 and parts[3] == "resolve":
            repo_id, revision, path = f"{parts[1]}/{parts[2]}", parts[4], "/".join(parts[5:])
            return self.resolve(repo_id, revision, path)
        self.error(404, "", "no such endpoint")

    def retry_after(self, status):
        value = self.server.repos.config.get("retry_after")
        return {"Retry-After": value} if value is not None and status in (429, 503) else {}

    def check_repo(self, repo_id, revision):
        repos = self.server.repos
        if repo_id not in repos.files:
            self.error(404, "RepoNotFound", f"Repository Not Found for url: {self.path}")
            return False
        if not self.authorized(repo_id):
            return False
        if revision not in ("main", repos.commit):
            self.error(404, "RevisionNotFound", f"Invalid rev id: {revision}")
            return False
        return True

    def listing(self, repo_id, revision):
        repos = self.server.repos
        if not self.check_repo(repo_id, revision):
            return
        siblings = []
        for path, info in repos.files[repo_id].items():
            size = repos.config.get("list_size", {}).get(path, info["size"])
            entry = {"rfilename": path, "size": size, "blobId": info["sha1"]}
            if info["lfs"]:
                entry["blobId"] = hashlib.sha1(path.encode()).hexdigest()
                entry["lfs"] = {"sha256": info["sha256"], "size": size,
                                "pointerSize": 134}
            if path in repos.config.get("no_digest", []):
                entry.pop("blobId")
                entry.get("lfs", {}).pop("sha256", None)
            for key, value in repos.config.get("lfs_fields", {}).get(path, {}).items():
                if value is None:
                    entry["lfs"].pop(key, None)
                else:
                    entry["lfs"][key] = value
            siblings.append(entry)
        for name in repos.config.get("extra_siblings", {}).get(repo_id, []):
            siblings.append({"rfilename": name, "size": 1})
        body = json.dumps({"id": repo_id, "sha": repos.commit, "siblings": siblings}).encode()
        self.reply(200, body, {"Content-Type": "application/json"})

    def resolve(self, repo_id, revision, path):
        repos = self.server.repos
        if not self.check_repo(repo_id, revision):
            return
        status = repos.pop(repos.errors, path)
        if status is not None:
            return self.reply(status, b"internal error", self.retry_after(status))
        info = repos.files[repo_id].get(path)
        if info is None or path in repos.config.get("missing", []):
            return self.error(404, "EntryNotFound", f"{path} does not exist on \"{revision}\"")
        headers = {"X-Repo-Commit": repos.commit}
        if info["lfs"]:
            quoted = urllib.parse.quote(path)
            headers.update({
                "Location": f"http://localhost:{self.server.storage_port}/blobs/"
                            f"{info['sha256']}?path={quoted}&expires=3600",
                "X-Linked-Size": str(info["size"]),
                "X-Linked-Etag": f"\"{info['sha256']}\"",
                "ETag": f"\"{info['sha256']}\""})
            if path in repos.config.get("no_etag", []):
                del headers["X-Linked-Etag"], headers["ETag"]
            if path in repos.config.get("no_redirect", []):
                del headers["Location"]
                headers.pop("ETag", None)  # a mirror's own ETag need not be the sha256
                return self.send_file(info["full"], path, headers)
            return self.reply(302, b"", headers)
        headers["ETag"] = f"\"{info['sha1']}\""
        self.send_file(info["full"], path, headers)

    # --- storage -------------------------------------------------------------------------------
    def storage(self):
        repos = self.server.repos
        if "Authorization" in self.headers:
            return self.reply(400, b"storage refuses requests that carry Authorization")
        url = urllib.parse.urlsplit(self.path)
        sha = url.path.rsplit("/", 1)[-1]
        if not url.path.startswith("/blobs/") or sha not in repos.blobs:
            return self.reply(404, b"no such blob")
        full, rel = repos.blobs[sha]
        self.send_file(full, rel, {"ETag": f"\"{sha}\""})

    # --- shared --------------------------------------------------------------------------------
    def send_file(self, full, rel, headers):
        repos = self.server.repos
        if rel in repos.config.get("no_etag", []):
            headers = {k: v for k, v in headers.items() if k not in ("ETag", "X-Linked-Etag")}
        size = os.path.getsize(full)
        start, end = 0, size - 1
        status = 200
        sized = rel not in repos.config.get("no_size_headers", [])
        header = self.headers.get("Range")
        if header and rel not in repos.config.get("ignore_range", []):
            first, _, last = header.removeprefix("bytes=").partition("-")
            start = repos.config.get("range_start", {}).get(rel, int(first))
            end = int(last) if last else size - 1
            if start >= size:
                return self.reply(416, b"", {"Content-Range": f"bytes */{size}"} if sized else {})
            status = 206
            if sized:
                headers["Content-Range"] = f"bytes {start}-{end}/{size}"
        length = end - start + 1
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        self.send_header("Accept-Ranges", "bytes")
        if sized:
            self.send_header("Content-Length", str(length))
        else:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        if self.command == "HEAD":
            return
        corrupt = repos.take_count(repos.corrupt, rel)
        with repos.lock:
            tamper = repos.tamper.pop(rel, None)
        trickle = repos.trickle.pop(rel, None) if self.server.role == "storage" else None
        cut = end + 1
        drop_every = repos.config.get("drop_every", 0) if self.server.role == "storage" else 0
        if drop_every:
            cut = min(cut, (start // drop_every + 1) * drop_every)
        with open(full, "rb") as f:
            if trickle is not None:
                deadline = time.monotonic() + trickle
                f.seek(start)
                while time.monotonic() < deadline:
                    self.wfile.write(f.read(8))
                    time.sleep(0.05)
                return self.hang_up()
            if corrupt:
                f.seek(start)
                data = bytearray(f.read(cut - start))
                data[len(data) // 2] ^= 0xFF
                self.wfile.write(bytes(data))
            else:
                offset = start
                if tamper is not None and tamper[2:] != ["after_cut"]:
                    half = start + (cut - start) // 2
                    self.wfile.write(os.pread(f.fileno(), half - start, start))
                    self.wfile.flush()
                    time.sleep(0.2)  # the client writes what it got, a block at a time
                    self.tamper_with(*tamper[:2], size)
                    offset = half
                while offset < cut:
                    sent = os.sendfile(self.connection.fileno(), f.fileno(), offset, cut - offset)
                    if sent == 0:
                        break
                    offset += sent
        if cut <= end:
            self.hang_up()
            if tamper is not None and tamper[2:] == ["after_cut"]:
                time.sleep(0.2)
                self.tamper_with(*tamper[:2], size)

    @staticmethod
    def tamper_with(path, how, size):
        if how == "append":
            with open(path, "ab") as f:
                f.write(b"\0" * 100)
        elif how == "truncate":
            os.truncate(path, 0)
        elif how == "replace":
            with open(path + ".new", "wb") as f:
                f.write(b"\0" * size)
            os.replace(path + ".new", path)
        elif how == "rewrite":
            with open(path, "r+b") as f:
                f.write(b"\0" * os.fstat(f.fileno()).st_size)

    def hang_up(self):
        self.close_connection = True
        self.wfile.flush()
        self.connection.shutdown(2)


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repos", required=True)
    parser.add_argument("--config", default="")
    parser.add_argument("--port_file", required=True)
    parser.add_argument("--log", required=True)
    parser.add_argument("--lifetime", type=float, default=120)
    args = parser.parse_args()
    config = {}
    if args.config:
        with open(args.config) as f:
            config = json.load(f)
    repos = Repos(args.repos, config)
    log_lock = threading.Lock()
    servers = {}
    for role in ("storage", "hub"):
        server = Server(("127.0.0.1", 0), Handler)
        server.role, server.repos, server.log_path, server.log_lock = role, repos, args.log, log_lock
        servers[role] = server
    servers["hub"].storage_port = servers["storage"].server_address[1]
    threads = [threading.Thread(target=s.serve_forever, daemon=True) for s in servers.values()]
    for thread in threads:
        thread.start()
    tmp = args.port_file + ".tmp"
    with open(tmp, "w") as f:
        json.dump({role: s.server_address[1] for role, s in servers.items()}, f)
    os.replace(tmp, args.port_file)
    parent = os.getppid()
    deadline = time.monotonic() + args.lifetime
    while time.monotonic() < deadline and os.getppid() == parent:
        time.sleep(0.1)
    for server in servers.values():
        server.shutdown()


if __name__ == "__main__":
    main()
