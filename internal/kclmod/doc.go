// Package kclmod resolves the dependencies of a KCL package (its kcl.mod) to directories, the way
// kcl's package manager (kpm) does, so that the KCL engine can be given `ExternalPkg{name, path}`
// entries: the engine itself does not fetch packages in this project.
//
// Dependencies may be vendored (vendor/<name>_<version> in the package), local paths, OCI
// artifacts in the format kpm pushes, or Git repositories; transitive dependencies (a dependency's
// own kcl.mod) are followed. Remote packages are downloaded into a cache shared by all callers,
// keyed by OCI manifest digest or Git commit, bounded in size, and safe for concurrent use from
// several goroutines and processes. Checksums recorded in kcl.mod.lock are verified.
//
// # Facts about kpm this package relies on
//
// Read from kcl-lang/kpm (paths in that repository):
//
//   - kcl.mod (pkg/package/modfile.go, pkg/package/toml.go, pkg/downloader/toml.go): TOML with
//     [package] name, edition, version, description, include, exclude; [profile] entries,
//     disable_none, sort_keys, selectors, overrides, arguments; [dependencies] where a value is
//     either a version string (`k8s = "1.31.2"`: the default registry, see below) or an inline
//     table: `{ path = "..." }` (checked first), `{ git = "url", tag | commit | branch = "...",
//     package = "..." }` (at most one of tag, commit, branch), `{ oci = "oci://host/repo",
//     tag = "..." }` (a `?tag=` query in the URL also works), `{ repo = "org/pkg", reg = "host",
//     tag = "..." }` (host-less OCI: the default registry), plus `version = "..."` and
//     `package = "real-name"` (the key is then an alias). `git://` URLs are cloned over https.
//
//   - The import name of a dependency is its key with '-' replaced by '_' (Dependency.GetAliasName);
//     kpm passes every dependency, transitive ones included, to kcl as `-E name=dir`
//     (KpmClient.ResolveDepsIntoMap).
//
//   - The default OCI registry is ghcr.io and the repository prefix kcl-lang
//     (`k8s = "1.31.2"` is oci://ghcr.io/kcl-lang/k8s:1.31.2); KPM_REG and KPM_REPO change them.
//
//   - kcl.mod.lock (pkg/package/toml.go MarshalLockTOML, pkg/package/modfile.go Dependency,
//     pkg/downloader/source.go): written by BurntSushi/toml from a map of dependencies under the
//     key "dependencies" (an example follows the list). OCI sources are written as reg, repo,
//     oci_tag; Git sources as url, branch, commit, git_tag (older kpm wrote `tag`), version,
//     package; local sources as path. Every dependency, transitive ones included, is listed.
//
//   - The checksum (pkg/utils/utils.go HashDir): filepath.Walk over the package directory (lexical
//     order within each directory, depth first), skipping directories and every path that contains
//     ".git" or ".tar" as a substring (so .gitignore and .github/ are skipped too), concatenating
//     the contents of the remaining files with nothing between them, sha256, standard base64 with
//     padding. kpm applies the substring test to the full path; Checksum applies it to the path
//     relative to the package, so the result does not depend on where the package is stored.
//     For an OCI dependency, newer kpm records the manifest annotation org.kcllang.package.sum as
//     the lock sum (KpmClient.AcquireDepSum) and falls back to HashDir of the download; kpm's
//     SumChecker compares the lock sum with that annotation.
//
//   - OCI format (pkg/oci/oci.go PushWithOciManifest, pkg/package/package.go
//     GenOciManifestFromPkg, pkg/constants/constants.go): one layer, the file
//     `<name>-<version>.tar` (an uncompressed tar of the package directory made by utils.TarDir:
//     entries named relative to the package root, ".git"/".tar" paths left out), layer media type
//     and manifest artifactType "application/vnd.oci.image.layer.v1.tar" (not +gzip), title
//     annotation org.opencontainers.image.title = the file name, packed by oras as an OCI 1.1
//     image manifest with the empty config; manifest annotations org.kcllang.package.name,
//     org.kcllang.package.version, org.kcllang.package.description, org.kcllang.package.sum (the
//     checksum above) and org.opencontainers.image.created. kpm's untar (utils.UnTarDir) accepts
//     only directories and regular files. A gzip-compressed layer is accepted here as well.
//
//   - Vendoring (pkg/client/vendor.go, Dependency.GenPathSuffix): every dependency that is not a
//     local path is copied to <package>/vendor/<name>_<ref>, where ref is the OCI tag, the Git
//     tag, commit or branch (in that order), or the version; the dependencies of local-path
//     dependencies are vendored into the same flat vendor directory.
//
// kcl.mod.lock as kpm writes it (kcl-lang/kpm pkg/api/test_data/test_kpm_package/kcl_pkg):
//
//	[dependencies]
//	  [dependencies.helloworld]
//	    name = "helloworld"
//	    full_name = "helloworld_0.1.3"
//	    version = "0.1.3"
//	    sum = "T9FGqbdtkuML4+pDyf4SFP5bDcDusbra6AKtCZygvNw="
//	    reg = "ghcr.io"
//	    repo = "kcl-lang/helloworld"
//	    oci_tag = "0.1.3"
//
// # Choices made here
//
//   - Sums are verified for downloaded and vendored packages when the lock has an entry for the
//     dependency at the same reference (an entry for another version is stale and ignored, as kpm
//     would rewrite it); an OCI package also passes when the lock sum equals its manifest's
//     org.kcllang.package.sum (kpm's SumChecker rule, for packages published with include/exclude).
//     Local path dependencies are not checked: kpm rewrites their sums on every run.
//   - An unversioned dependency is pinned by its lock entry; without one, OCI takes the highest
//     semantic-version tag and Git the default branch. A Git branch is pinned to the lock's commit.
//   - One package per import name: the first requirement met breadth first wins (the root's own
//     dependencies first); a conflicting one is reported in Result.Warnings.
//   - Local path dependencies must stay inside the source root (for the root's packages) or inside
//     the downloaded package (for a remote package's). Git is cloned over http and https only.
//   - Registries, Git servers and kcl.mod files are written by possibly hostile tenants. Every
//     request (redirects and token requests included) must go to a host of Options.AllowedHosts.
//     Every connection is refused to this host's own addresses, to the special-purpose ranges
//     (IANA's registries, multicast, IPv6 outside 2000::/3) and to Options.DeniedNetworks, unless
//     Options.AllowedNetworks admits the address; NAT64, 6to4 and Teredo addresses must pass with
//     the IPv4 address they reach too. The address is checked when connecting, after name
//     resolution. A refusal is reported as ErrHostNotAllowed, naming the host and the range,
//     never with what a server answered or how a connection failed. go-git v5 has no per-call
//     HTTP client: the package installs its own for http and https at init, which applies the
//     policy of the Resolver whose request it carries (see gitTransport).
//   - Git credentials are sent over https to their exact host and port only; over plain http
//     only when marked insecure. Redirects to another scheme, host or port drop them. A CA bundle
//     given with them (a Flux Secret's ca.crt) is trusted for that host and port only.
//   - MaxPackageFiles bounds every entry of a package (files, directories, symlinks), counted
//     while reading the archive or, for Git, the commit's tree before it is checked out.
package kclmod
