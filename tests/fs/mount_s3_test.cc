// mount-s3's command line, as Mountpoint for Amazon S3's CSI driver builds it,
// translated into tensorfs' MountOptions (fs/mount_s3.h): what each option
// becomes, which are refused and with what words, tensorfs' own options as
// one mount option, and the help that lists them.
#include "fs/mount_s3.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>

#include "fs/command_line.h"

namespace tensorfs {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::StartsWith;

// The driver's user agent: one argument holding spaces.
constexpr char kUserAgentArg[] =
    "--user-agent-prefix=s3-csi-driver/v2.7.0 credential-source#driver k8s/v1.31.4-eks md/install#helm";

MountS3Command Translated(const std::vector<std::string>& args) {
  StatusOr<MountS3Command> command = TranslateMountS3(args);
  EXPECT_TRUE(command.ok()) << command.status().message();
  return command.ok() ? *command : MountS3Command{};
}

std::string Refusal(const std::vector<std::string>& args) {
  StatusOr<MountS3Command> command = TranslateMountS3(args);
  EXPECT_FALSE(command.ok()) << "accepted";
  if (command.ok()) return "";
  EXPECT_EQ(command.status().code(), ErrorCode::kInvalidArgument);
  return command.status().message();
}

TEST(MountS3Test, TheDriversCommandLineServesTheBucketsPrefixOnTheDescriptor) {
  // A volume with an fsGroup and mountOptions [prefix=models/llama/, region=eu-west-1], as
  // aws-s3-csi-mounter runs it: the sorted arguments after BUCKET /dev/fd/3.
  const MountS3Command c = Translated({"my-models", "/dev/fd/3", "--allow-other", "--dir-mode=770", "--file-mode=660",
                                       "--foreground", "--gid=1000", "--prefix=models/llama/", "--region=eu-west-1",
                                       kUserAgentArg});
  EXPECT_EQ(c.action, MountS3Command::Action::kMount);
  const MountOptions& o = c.options;
  EXPECT_EQ(o.source, "s3://my-models/models/llama/");
  EXPECT_EQ(o.mountpoint, "/dev/fd/3");
  EXPECT_TRUE(o.foreground);
  EXPECT_EQ(o.region, "eu-west-1");
  EXPECT_EQ(o.gid, 1000u);
  EXPECT_FALSE(o.uid.has_value());
  EXPECT_EQ(o.dir_mode, 0770u);
  EXPECT_EQ(o.file_mode, 0660u);
  EXPECT_EQ(o.user_agent_prefix, "s3-csi-driver/v2.7.0 credential-source#driver k8s/v1.31.4-eks md/install#helm");
  EXPECT_FALSE(o.allow_other) << "the node plugin's mount data holds allow_other";
  EXPECT_FALSE(o.allow_root);
  EXPECT_THAT(c.notes, IsEmpty());
}

TEST(MountS3Test, AllowRootLetsOnlyRootAndTheMountsUserIn) {
  const MountS3Command c = Translated({"b", "/dev/fd/3", "--allow-root", "--foreground"});
  EXPECT_TRUE(c.options.allow_root);
  EXPECT_FALSE(c.options.allow_other);
  EXPECT_EQ(c.options.source, "s3://b");
}

TEST(MountS3Test, AllowOtherOnADirectoryIsTensorfsAllowOther) {
  const MountS3Command c = Translated({"b", "/mnt/b", "--allow-other"});
  EXPECT_TRUE(c.options.allow_other);
  EXPECT_FALSE(c.options.foreground) << "mount-s3 goes to the background unless --foreground";
}

TEST(MountS3Test, AllowOtherAndAllowRootConflictAsInMountS3) {
  EXPECT_EQ(Refusal({"b", "/dev/fd/3", "--allow-other", "--allow-root"}),
            "the argument '--allow-other' cannot be used with '--allow-root'");
}

TEST(MountS3Test, AnUnknownOptionIsRefusedInMountS3sWords) {
  const std::string message = Refusal({"b", "/dev/fd/3", "--invalid-argument"});
  EXPECT_THAT(message, StartsWith("unexpected argument '--invalid-argument' found"));
  const std::string printed = MountS3UsageError(message);
  EXPECT_THAT(printed, StartsWith("error: unexpected argument '--invalid-argument' found\n"));
  EXPECT_THAT(printed, HasSubstr("\nUsage: mount-s3 [OPTIONS] <BUCKET_NAME> <DIRECTORY>\n"));
  EXPECT_THAT(printed, ::testing::EndsWith("For more information, try '--help'.\n"));
  EXPECT_THAT(Refusal({"b", "/dev/fd/3", "-x"}), StartsWith("unexpected argument '-x' found"));
}

TEST(MountS3Test, OptionsThatAskForWritesAreRefusedSayingWhatToDo) {
  for (const char* write : {"--allow-delete", "--allow-overwrite", "--incremental-upload"}) {
    const std::string message = Refusal({"b", "/dev/fd/3", write, "--foreground"});
    EXPECT_THAT(message, StartsWith(std::string(write) + " asks for writes"));
    EXPECT_THAT(message, HasSubstr("read-only"));
    EXPECT_THAT(message, HasSubstr("remove it from the volume's mountOptions"));
  }
}

TEST(MountS3Test, WhatTensorfsCannotDoIsRefused) {
  EXPECT_THAT(Refusal({"b", "/dev/fd/3", "--transfer-acceleration"}),
              StartsWith("--transfer-acceleration is not supported: "));
  EXPECT_THAT(Refusal({"b", "/dev/fd/3", "--bucket-type=directory"}),
              HasSubstr("does not serve S3 Express One Zone directory buckets"));
  EXPECT_TRUE(TranslateMountS3({"b", "/dev/fd/3", "--bucket-type", "general-purpose"}).ok());
}

TEST(MountS3Test, TheDiskCacheIsAcceptedAndNotedAsUnused) {
  const MountS3Command c = Translated({"b", "/dev/fd/3", "--cache=/local-cache", "--foreground",
                                       "--max-cache-size=2048", "--maximum-throughput-gbps=100"});
  ASSERT_EQ(c.notes.size(), 3u);
  EXPECT_THAT(c.notes[0], StartsWith("ignoring --cache=/local-cache: "));
  EXPECT_THAT(c.notes[0], HasSubstr("cache_size"));
  EXPECT_THAT(c.notes[1], StartsWith("ignoring --max-cache-size=2048: "));
  EXPECT_THAT(c.notes[2], StartsWith("ignoring --maximum-throughput-gbps=100: "));
}

TEST(MountS3Test, APrefixMustEndInASlashAsInMountS3) {
  EXPECT_EQ(Refusal({"b", "/dev/fd/3", "--prefix=models"}),
            "invalid value 'models' for '--prefix <PREFIX>': prefix must end in '/'");
}

TEST(MountS3Test, AnS3UriIsTheSourceAndTakesNoPrefixOption) {
  EXPECT_EQ(Translated({"s3://b/models/", "/dev/fd/3"}).options.source, "s3://b/models/");
  EXPECT_EQ(Refusal({"s3://b/models/", "/dev/fd/3", "--prefix=x/"}), "explicit prefix option not allowed with S3 URI");
  EXPECT_THAT(Refusal({"b/models", "/dev/fd/3"}), HasSubstr("the bucket must have a valid name"));
}

TEST(MountS3Test, ModesAndIdsAreCheckedAsMountS3ChecksThem) {
  EXPECT_EQ(Refusal({"b", "/dev/fd/3", "--dir-mode=800"}),
            "invalid value '800' for '--dir-mode <DIR_MODE>': must be a valid octal number");
  EXPECT_EQ(Refusal({"b", "/dev/fd/3", "--file-mode=7644"}),
            "invalid value '7644' for '--file-mode <FILE_MODE>': only user/group/other permissions are supported");
  EXPECT_THAT(Refusal({"b", "/dev/fd/3", "--uid=0"}), StartsWith("invalid value '0' for '--uid <UID>'"));
  const MountS3Command c = Translated({"b", "/dev/fd/3", "--uid=1001", "--dir-mode=0750", "--file-mode", "640"});
  EXPECT_EQ(c.options.uid, 1001u);
  EXPECT_EQ(c.options.dir_mode, 0750u);
  EXPECT_EQ(c.options.file_mode, 0640u);
}

TEST(MountS3Test, MetadataTtlMinimalIndefiniteAndSeconds) {
  const MountOptions minimal = Translated({"b", "/dev/fd/3", "--metadata-ttl=minimal"}).options;
  EXPECT_EQ(minimal.metadata_ttl_s, 0);
  EXPECT_EQ(minimal.negative_ttl_s, 0);
  EXPECT_EQ(minimal.attr_timeout_s, 1) << "as mount-s3, never a kernel cache of 0 s";
  EXPECT_EQ(minimal.entry_timeout_s, 1);
  const MountOptions indefinite = Translated({"b", "/dev/fd/3", "--metadata-ttl", "indefinite"}).options;
  EXPECT_TRUE(std::isinf(indefinite.metadata_ttl_s));
  EXPECT_TRUE(std::isinf(indefinite.negative_ttl_s));
  const MountOptions seconds =
      Translated({"b", "/dev/fd/3", "--metadata-ttl=300", "--negative-metadata-ttl=10"}).options;
  EXPECT_EQ(seconds.metadata_ttl_s, 300);
  EXPECT_EQ(seconds.negative_ttl_s, 10);
  EXPECT_FALSE(seconds.given.contains("attr_timeout")) << "the kernel follows metadata_ttl";
  const MountS3Command zero = Translated({"b", "/dev/fd/3", "--metadata-ttl=0"});
  EXPECT_EQ(zero.options.attr_timeout_s, 1);
  EXPECT_THAT(zero.notes, ElementsAre(HasSubstr("taken as 'minimal'")));
  EXPECT_TRUE(std::isinf(Translated({"b", "/dev/fd/3", "--metadata-ttl=3000000000"}).options.metadata_ttl_s))
      << "mount-s3's 100 years are tensorfs' forever";
  const MountOptions unset = Translated({"b", "/dev/fd/3"}).options;
  EXPECT_EQ(unset.metadata_ttl_s, MountOptions{}.metadata_ttl_s) << "tensorfs' own default";
  EXPECT_EQ(Refusal({"b", "/dev/fd/3", "--metadata-ttl=soon"}),
            "invalid value 'soon' for '--metadata-ttl <SECONDS|indefinite|minimal>': TTL must be a valid number of "
            "seconds, or 'indefinite', or 'minimal'");
}

TEST(MountS3Test, TensorfsOptionsTravelAsOneMountOptionAppliedLast) {
  // A PersistentVolume's mountOptions entry "tensorfs cache_size=96M,..." as the driver passes it.
  const MountS3Command c = Translated({"b", "/dev/fd/3", "--metadata-ttl=indefinite",
                                       "--tensorfs=cache_size=96M,views=none,max_fetches=4,metadata_ttl=5"});
  EXPECT_EQ(c.options.engine.cache_size, 96u << 20);
  EXPECT_TRUE(c.options.views.empty());
  EXPECT_EQ(c.options.engine.max_fetches, 4);
  EXPECT_EQ(c.options.metadata_ttl_s, 5) << "tensorfs' own options come last";
  const std::string bad = Refusal({"b", "/dev/fd/3", "--tensorfs=cache_size=lots"});
  EXPECT_THAT(bad, StartsWith("invalid value 'cache_size=lots' for '--tensorfs <OPTIONS>': "));
  EXPECT_THAT(bad, HasSubstr("512M"));
  EXPECT_THAT(Refusal({"b", "/dev/fd/3", "--tensorfs=no_such_option"}), HasSubstr("unknown option 'no_such_option'"));
  const MountS3Command two = Translated({"b", "/dev/fd/3", "--tensorfs=views=none", "--tensorfs=cache_size=64M"});
  EXPECT_EQ(two.options.engine.cache_size, 64u << 20);
}

TEST(MountS3Test, SourceCredentialAndLoggingOptionsMapToTensorfsOnes) {
  const MountOptions o = Translated({"b", "/dev/fd/3", "--endpoint-url=http://127.0.0.1:9000", "--force-path-style",
                                     "--profile", "reader", "--requester-pays", "--expected-bucket-owner=111122223333",
                                     "--max-threads=8", "--debug", "--read-only", "--ca-bundle=/etc/ca.pem"})
                            .options;
  EXPECT_EQ(o.endpoint, "http://127.0.0.1:9000");
  EXPECT_TRUE(o.force_path_style);
  EXPECT_EQ(o.profile, "reader");
  EXPECT_TRUE(o.requester_pays);
  EXPECT_EQ(o.expected_bucket_owner, "111122223333");
  EXPECT_EQ(o.max_threads, 8);
  EXPECT_EQ(o.log_level, "debug");
  EXPECT_EQ(o.ca_file, "/etc/ca.pem");
  EXPECT_TRUE(Translated({"b", "/dev/fd/3", "--no-sign-request"}).options.no_sign_request);
  EXPECT_EQ(Translated({"b", "/dev/fd/3", "-fd"}).options.log_level, "debug");
  EXPECT_TRUE(Translated({"b", "/dev/fd/3", "-fd"}).options.foreground);
}

TEST(MountS3Test, FstabStyleOptionsAreMountS3sOptions) {
  const MountOptions o = Translated({"b", "/mnt/b", "-o", "allow-other,prefix=a/,region=us-west-2"}).options;
  EXPECT_TRUE(o.allow_other);
  EXPECT_EQ(o.source, "s3://b/a/");
  EXPECT_EQ(o.region, "us-west-2");
}

TEST(MountS3Test, MalformedCommandLinesGetClapsMessages) {
  EXPECT_EQ(Refusal({"b", "/dev/fd/3", "--region"}),
            "a value is required for '--region <REGION>' but none was supplied");
  EXPECT_EQ(Refusal({"b", "/dev/fd/3", "--read-only=true"}),
            "unexpected value 'true' for '--read-only' found; no more were expected");
  EXPECT_EQ(Refusal({"b", "/dev/fd/3", "--region=a", "--region=b"}),
            "the argument '--region <REGION>' cannot be used multiple times");
  EXPECT_EQ(Refusal({"b"}), "the following required arguments were not provided:\n  <DIRECTORY>");
  EXPECT_EQ(Refusal({"b", "/dev/fd/3", "extra"}), "unexpected argument 'extra' found");
  EXPECT_EQ(Translated({"--", "b", "/dev/fd/3"}).options.mountpoint, "/dev/fd/3");
}

TEST(MountS3Test, HelpAndVersion) {
  EXPECT_EQ(Translated({"--help"}).action, MountS3Command::Action::kHelp);
  EXPECT_EQ(Translated({"-h"}).action, MountS3Command::Action::kHelp);
  EXPECT_EQ(Translated({"--version"}).action, MountS3Command::Action::kVersion);
  EXPECT_EQ(Translated({"-V"}).action, MountS3Command::Action::kVersion);
}

TEST(MountS3Test, TheNameMountS3SelectsThisCommandLine) {
  EXPECT_TRUE(IsMountS3Invocation("mount-s3"));
  EXPECT_TRUE(IsMountS3Invocation("/mountpoint-s3/bin/mount-s3"));
  EXPECT_FALSE(IsMountS3Invocation("/usr/bin/tensorfs"));
  EXPECT_FALSE(IsMountS3Invocation("mount-s3.real"));
}

TEST(MountS3HelpTest, NamesEveryOptionMountS3DocumentsForAReadOnlyMount) {
  const std::string help = RenderMountS3Help();
  for (const char* option :
       {"--prefix", "--region", "--endpoint-url", "--force-path-style", "--uid", "--gid", "--dir-mode", "--file-mode",
        "--allow-other", "--allow-root", "--metadata-ttl", "--negative-metadata-ttl", "--profile", "--requester-pays",
        "--expected-bucket-owner", "--no-sign-request", "--max-threads", "--debug", "--user-agent-prefix",
        "--read-only", "--allow-delete", "--allow-overwrite", "--cache", "--max-cache-size", "--tensorfs"}) {
    EXPECT_THAT(help, HasSubstr(std::string(option) + " ")) << option;
  }
  EXPECT_THAT(help, HasSubstr("Usage: mount-s3 [OPTIONS] <BUCKET_NAME> <DIRECTORY>"));
  EXPECT_THAT(help, HasSubstr("docs/EKS.md"));
  std::istringstream lines(help);
  for (std::string line; std::getline(lines, line);) EXPECT_LE(line.size(), kHelpWidth) << line;
}

TEST(MountS3HelpTest, EveryRowIsMappedUnusedOrRefused) {
  for (const MountS3OptionDoc& doc : MountS3Options()) {
    EXPECT_THAT((std::vector<std::string_view>{"mapped", "unused", "refused"}), ::testing::Contains(doc.kind))
        << doc.names;
    EXPECT_FALSE(doc.meaning.empty()) << doc.names;
  }
}

}  // namespace
}  // namespace tensorfs
